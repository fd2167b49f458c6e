"""mtad: multi-token joint decoding research suite."""

# the package's name where it names a place or a namespace (the cache folder, installed configs, a draft
# file's metadata key), read from the package itself so that no module spells it
PACKAGE = __name__
