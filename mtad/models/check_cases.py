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
# each lossless method at each of its exactness settings (`mtad.decoding.registry.exactness_cases`), the
# float64 pairs, decode paths and processings taken in turn so that every one meets several methods
DIST_SETUPS = (  # (float64 pair, decode path, processing)
    ("llama", "static", NO_TRUNCATION),
    ("opt", "eager", PAPER),
    ("llama+head", "static", NO_TRUNCATION),
    ("llama", "eager", PAPER),
    ("opt", "static", NO_TRUNCATION),
    ("llama+head", "eager", PAPER),
)


def dist_cases() -> tuple[tuple[str, str, str, dict, dict], ...]:
    """(float64 pair, decode path, method, settings, processing) of every distribution case."""
    from mtad.decoding.registry import exactness_cases

    cases = exactness_cases()
    setups = DIST_SETUPS * (len(cases) // len(DIST_SETUPS) + 1)
    return tuple(
        (pair, path, method, settings, processing)
        for (method, settings), (pair, path, processing) in zip(cases, setups)
    )


# tree attention: a two-level token tree after a prefix, each level (tokens, parent node of each;
# -1: the prefix's last token)
TREE_PREFIX = [3, 7, 1, 9, 4]
TREE_LEVELS = (([5, 2, 5], [-1, -1, -1]), ([8, 8, 1, 6], [0, 0, 1, 2]))
