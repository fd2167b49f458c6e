"""The data the requests are made of: templates, word lists and weights, in JSON files under
`mtad/assets/requests/` (one per kind of request, or per group of tables several kinds share).

Each file is read once, on first use, so importing the modules that draw requests reads nothing.
Arrays come back as tuples (the cached tables are shared by every caller), and each file's "about"
note, which says what its tables hold and what their slots mean, is left out.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

from mtad import PACKAGE

DATA_DIR = files(PACKAGE) / "assets" / "requests"


def _frozen(value: Any) -> Any:
    """`value` with every JSON array made a tuple, recursively."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


@cache
def table(name: str) -> dict[str, Any]:
    """The tables of `mtad/assets/requests/<name>.json`, by key."""
    tables = json.loads((DATA_DIR / f"{name}.json").read_text(encoding="utf-8"))
    tables.pop("about", None)
    return _frozen(tables)


def at(path: str) -> Any:
    """One table, named "file.key" ("rewrite.instructions")."""
    name, _, key = path.partition(".")
    return table(name)[key]


def size(path: str) -> int:
    """How many entries a table holds: "file.key" counts its entries, "file.key.*" the entries of all
    the lists it maps to (templates by subject category)."""
    if path.endswith(".*"):
        return sum(len(entries) for entries in at(path[:-2]).values())
    return len(at(path))


def data_files() -> list[str]:
    """The names of the data files (without ".json")."""
    return sorted(p.name.removesuffix(".json") for p in DATA_DIR.iterdir() if p.name.endswith(".json"))
