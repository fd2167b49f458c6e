"""The study's decoding methods: their names in table order and their display labels.

Torch-free, so the report reads it without loading the decoding engine. The implementations
are ``mtad.decoding.DECODERS`` (name -> class; a test keeps the two in step), their rules are
in ``mtad/decoding/README.md``, their parameters and defaults in each one's settings class
(``mtad/decoding/params.py``).
"""

LABELS = {
    "sampling": "sampling",
    "sps": "SpS",
    "spectr": "SpecTr",
    "specinfer": "SpecInfer",
    "mtad": "MTAD",
    "mmtad": "MMTAD",
}
METHODS = tuple(LABELS)  # sampling first: the reference every speed-up divides by
