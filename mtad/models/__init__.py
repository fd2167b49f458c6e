"""Target/draft pairs (loading, checks), the distilled draft model and its distillation."""

from .pairs import Pair, check_same_tokenizer, list_pairs, load_pair, pair_config

__all__ = ["Pair", "check_same_tokenizer", "list_pairs", "load_pair", "pair_config"]
