"""The small cases the exactness and decode-path checks share. The tests run them on the CPU
(test_decoding_contract.py, test_decode_paths.py, test_sparse_dists.py, test_adaptive_drafting.py)
and `make gpu-check` runs them on a device (mtad.bench.gpu_check), so both read them here; the models
they run on are `tiny.float64_pair`'s, each method's small settings its `MethodSpec.test_settings`."""

from __future__ import annotations

# every method's tokens: float64 pairs over 24 tokens, each method at its small settings
# (`mtad.decoding.registry.spec(method).test_settings`)
TOKEN_VOCAB = 24
TOKEN_PROMPT = [5, 1, 9, 2, 7]
FLOAT64_PAIRS = ("llama", "opt", "llama+head")  # the kinds of `float64_pair`

# the lossless methods' (and sampling's) draws against the target distribution, enumerable over
# DIST_TOKENS tokens of a DIST_VOCAB-token vocabulary
DIST_VOCAB, DIST_TOKENS, DIST_PROMPT = 4, 3, [1, 3, 2]
NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
PAPER = {"temperature": 1.0, "top_k": 3, "top_p": 0.9}
DIST_CASES = (  # (float64 pair, decode path, method, settings, processing)
    ("llama", "static", "sampling", {}, NO_TRUNCATION),
    ("llama", "static", "sps", {"gamma": 2}, NO_TRUNCATION),
    ("opt", "eager", "blockverify", {"gamma": 2}, PAPER),
    ("llama", "eager", "spectr", {"gamma": 2, "num_drafts": 3}, NO_TRUNCATION),
    ("opt", "eager", "specinfer", {"k_config": (3, 2), "replacement": True}, PAPER),
    ("llama+head", "static", "specinfer", {"k_config": (3, 2), "replacement": False}, NO_TRUNCATION),
    ("llama+head", "static", "sps", {"gamma": 2}, NO_TRUNCATION),
)

# tree attention: a two-level token tree after a prefix, each level (tokens, parent node of each;
# -1: the prefix's last token)
TREE_PREFIX = [3, 7, 1, 9, 4]
TREE_LEVELS = (([5, 2, 5], [-1, -1, -1]), ([8, 8, 1, 6], [0, 0, 1, 2]))
