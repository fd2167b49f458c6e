"""Lossless methods reproduce the target distribution: empirical vs enumerated, on tiny models.

For each case, N seeded generations of 2 tokens; the exact distribution of (x1, x2) is
p(x1 | prompt) p(x2 | prompt, x1), enumerated with the target. A chi-square test with false-
alarm rate 1e-3 (fixed seeds, so the outcome is deterministic) must not reject; the TV
distance is printed (run with -s) for the record.
"""
import pytest
import torch

from mtad.metrics.exactness import chisquare_exactness, empirical_counts, sequence_probs
from tiny_models import biased_llama, tiny_llama, tiny_opt

VOCAB, RUNS, FALSE_ALARM = 4, 1000, 1e-3
PROMPT = torch.tensor([[1, 3, 2]])


def exact_two_token_probs(target, processing) -> torch.Tensor:
    """[V*V] exact probability of each (x1, x2) under the processed target distribution."""
    return sequence_probs(target, PROMPT, 2, processing)


def empirical(method, target, draft, params, decode_path="eager") -> torch.Tensor:
    return empirical_counts(method, target, draft, params, PROMPT, 2, RUNS, decode_path=decode_path)


def check(counts, probs, label):
    result = chisquare_exactness(counts, probs)
    assert result.impossible == 0, f"{label}: tokens emitted that have zero target probability"
    print(f"\n[exactness] {label}: TV={result.tv:.4f} chi2 p={result.pvalue:.3g} (N={RUNS})")
    assert result.pvalue > FALSE_ALARM, \
        f"{label}: empirical distribution differs from target (p={result.pvalue:.2e}, TV={result.tv:.3f})"


NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
PAPER = {"temperature": 1.0, "top_k": 3, "top_p": 0.9}
LOSSLESS = [
    ("sps", {"gamma": 2}),
    ("spectr", {"gamma": 2, "num_drafts": 3}),
    ("specinfer", {"k_config": (3, 2), "replacement": True}),
    ("specinfer", {"k_config": (3, 2), "replacement": False}),
]


@pytest.mark.parametrize("method,params", LOSSLESS, ids=lambda v: str(v))
@pytest.mark.parametrize("arch,path", [("llama", "eager"), ("llama", "static"), ("opt", "eager")])
def test_lossless_with_a_different_draft(method, params, arch, path):
    build = tiny_llama if arch == "llama" else tiny_opt
    target, draft = build(0, VOCAB, sharpness=3.0), build(1, VOCAB, sharpness=3.0)
    processing = PAPER if arch == "opt" else NO_TRUNCATION  # cover the processed case too
    counts = empirical(method, target, draft, {**params, **processing}, decode_path=path)
    check(counts, exact_two_token_probs(target, processing), f"{arch}/{path}/{method}/{params}/{processing}")


NEG = float("-inf")
ADVERSARIAL = {
    # draft identical to the target: everything accepted, still exact
    "draft=target": (torch.zeros(VOCAB), None),
    # disjoint supports: target on {0,1,2}, draft on {3,4}; every draft token is rejected
    "disjoint": (torch.tensor([0, 0, NEG, NEG]), torch.tensor([NEG, NEG, 0, 0])),
    # one-hot draft: always proposes token 2
    "one-hot": (torch.zeros(VOCAB), torch.tensor([0, 0, 60.0, 0])),
}
# every method meets the one-hot draft; the other cases run on SpS and the no-replacement tree
ADVERSARIAL_CASES = [(case, *m) for case in ADVERSARIAL for m in LOSSLESS
                     if case == "one-hot" or m[0] == "sps" or m[1].get("replacement") is False]


@pytest.mark.parametrize("case,method,params", ADVERSARIAL_CASES, ids=lambda v: str(v))
def test_lossless_with_adversarial_drafts(method, params, case):
    target_bias, draft_bias = ADVERSARIAL[case]
    target = biased_llama(0, target_bias, sharpness=3.0)
    draft = target if draft_bias is None else biased_llama(1, draft_bias, sharpness=3.0)
    counts = empirical(method, target, draft, {**params, **NO_TRUNCATION})
    check(counts, exact_two_token_probs(target, NO_TRUNCATION), f"{case}/{method}/{params}")
