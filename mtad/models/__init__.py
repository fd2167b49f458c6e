"""Target/draft pairs (loading, checks), the GGUF cache of the embedded target and the draft architectures."""

from .pairs import Pair, check_same_tokenizer, list_pairs, load_pair, pair_config

__all__ = ["Pair", "check_same_tokenizer", "list_pairs", "load_pair", "pair_config"]
