"""Target/draft pairs and the models they are made of:

- ``pairs``: a pair's config, checks and loading (hub, local paths, the embedded pair);
- ``gguf_cache`` and ``quantized``: the embedded target's GGUF, converted once, and its 4-bit weights;
- ``draft`` and ``head``: the two draft architectures (a layer-subset model, a feature head);
- ``tiny``: tiny random-weight models and the test tokenizer.
"""

from .pairs import Pair, check_same_tokenizer, list_pairs, load_pair, pair_config

__all__ = ["Pair", "check_same_tokenizer", "list_pairs", "load_pair", "pair_config"]
