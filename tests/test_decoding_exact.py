"""Lossless methods reproduce the target distribution: empirical vs enumerated, on tiny models.

For each case, N seeded generations of 3 tokens with γ = 2 (trees of depth 2), so the third
token is the bonus whenever the first block is accepted whole; the exact distribution of
(x1, x2, x3) is p(x1 | prompt) p(x2 | prompt, x1) p(x3 | prompt, x1, x2), enumerated with the
target. A chi-square test with false-alarm rate 1e-3 (fixed seeds, so the outcome is
deterministic) must not reject; the TV distance is printed (run with -s) for the record.

Power (alpha = 1e-3; noncentrality N * chi2(broken || exact), the divergence measured by
running the deliberately broken rule 3000 times on the same case):
  * a bonus token drawn from the last draft row instead of the row after the block moves the
    different-draft sps cases by chi2 = 0.069 (llama, TV ~0.1) and 0.059 (opt): detected with
    probability 0.999 and 0.9998 at N = DRAFT_RUNS = 1500 (0.93 and 0.98 at 1000);
  * SpecInfer without replacement with q' renormalised over p's support only (wrong only where
    q has mass outside p's support) moves the partial-overlap cases by chi2 = 0.071 (llama) and
    0.114 (opt), TV ~0.12: detected with probability 0.996 and > 0.99999 at N = 1000 (where
    both supports are full, as in the llama different-draft case, it changes nothing).
A generic TV of 0.03 over the 64 cells (chi2 >= 4 TV^2 = 0.0036) needs N ~ 20000 per case for
power 0.95, too slow with models; the rules alone are tested against such a TV, at larger N,
in test_acceptance_rules.py.

Slow (about a minute per case on a shared 2-core CPU): ``make test`` runs them, ``make test-fast``
does not.
"""

import pytest
import torch

from mtad.decoding.logits import logits_to_probs
from mtad.metrics.exact_enumeration import empirical_counts, sequence_probs
from mtad.models.tiny import biased_llama, tiny_head, tiny_llama, tiny_opt
from mtad.stats.goodness_of_fit import chisquare_exactness

pytestmark = pytest.mark.slow

VOCAB, TOKENS, RUNS, DRAFT_RUNS, FALSE_ALARM = 4, 3, 1000, 1500, 1e-3
PROMPT = torch.tensor([[1, 3, 2]])


def exact_probs(target, processing) -> torch.Tensor:
    """[V**3] exact probability of each (x1, x2, x3) under the processed target distribution."""
    return sequence_probs(target, PROMPT, TOKENS, processing)


def empirical(method, target, draft, params, runs=RUNS, decode_path="eager") -> torch.Tensor:
    return empirical_counts(method, target, draft, params, PROMPT, TOKENS, runs, decode_path=decode_path)


def check(counts, probs, label):
    result = chisquare_exactness(counts, probs)
    assert result.impossible == 0, f"{label}: tokens emitted that have zero target probability"
    print(f"\n[exactness] {label}: TV={result.tv:.4f} chi2 p={result.pvalue:.3g} (N={result.runs})")
    assert result.pvalue > FALSE_ALARM, (
        f"{label}: empirical distribution differs from target (p={result.pvalue:.2e}, TV={result.tv:.3f})"
    )


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
    counts = empirical(method, target, draft, {**params, **processing}, runs=DRAFT_RUNS, decode_path=path)
    check(counts, exact_probs(target, processing), f"{arch}/{path}/{method}/{params}/{processing}")


# top-k 3 of 4 tokens on both models, with draft and target keeping different tokens: q has
# mass where p is 0 and p where q is 0 (asserted below). Sharp heads (x10) make the residuals
# after a rejection depend on that mass.
TOP3 = {"temperature": 1.0, "top_k": 3, "top_p": 1.0}
PARTIAL_PAIRS = {"llama": (tiny_llama, 0, 3), "opt": (tiny_opt, 0, 1)}


@pytest.mark.parametrize("method,params", [LOSSLESS[1], LOSSLESS[3]], ids=lambda v: str(v))
@pytest.mark.parametrize("arch", list(PARTIAL_PAIRS))
def test_lossless_when_supports_partly_overlap(method, params, arch):
    build, target_seed, draft_seed = PARTIAL_PAIRS[arch]
    target, draft = build(target_seed, VOCAB, sharpness=10.0), build(draft_seed, VOCAB, sharpness=10.0)
    with torch.no_grad():
        p, q = (logits_to_probs(m(input_ids=PROMPT).logits[0, -1], **TOP3) for m in (target, draft))
    assert ((q > 0) & (p == 0)).any() and ((p > 0) & (q == 0)).any() and ((p > 0) & (q > 0)).any()
    counts = empirical(method, target, draft, {**params, **TOP3})
    check(counts, exact_probs(target, TOP3), f"partial-overlap/{arch}/{method}/{params}")


NEG = float("-inf")
ADVERSARIAL = {
    # draft identical to the target: every block accepted, the bonus token always observed
    "draft=target": (torch.zeros(VOCAB), None),
    # disjoint supports: target on {0,1}, draft on {2,3}; every draft token is rejected
    "disjoint": (torch.tensor([0, 0, NEG, NEG]), torch.tensor([NEG, NEG, 0, 0])),
    # one-hot draft: always proposes token 2
    "one-hot": (torch.zeros(VOCAB), torch.tensor([0, 0, 60.0, 0])),
}
# every method meets the one-hot draft; the other cases run on SpS and the no-replacement tree
ADVERSARIAL_CASES = [
    (case, *m)
    for case in ADVERSARIAL
    for m in LOSSLESS
    if case == "one-hot" or m[0] == "sps" or m[1].get("replacement") is False
]


@pytest.mark.parametrize("case,method,params", ADVERSARIAL_CASES, ids=lambda v: str(v))
def test_lossless_with_adversarial_drafts(method, params, case):
    target_bias, draft_bias = ADVERSARIAL[case]
    target = biased_llama(0, target_bias, sharpness=3.0)
    draft = target if draft_bias is None else biased_llama(1, draft_bias, sharpness=3.0)
    counts = empirical(method, target, draft, {**params, **NO_TRUNCATION})
    check(counts, exact_probs(target, NO_TRUNCATION), f"{case}/{method}/{params}")


# the same tests with a feature-head draft (its q read from the target's own hidden states):
# each lossless method once, over the decode paths and both architectures
HEAD_CASES = [
    ("llama", "static", *LOSSLESS[0]),
    ("opt", "eager", *LOSSLESS[1]),
    ("llama", "eager", *LOSSLESS[2]),
    ("llama", "static", *LOSSLESS[3]),
]
# the fused-depths head with its own output layer (models.head): every lossless method once
FUSED_HEAD_CASES = [
    ("llama", "eager", *LOSSLESS[0]),
    ("llama", "static", *LOSSLESS[1]),
    ("opt", "eager", *LOSSLESS[2]),
    ("llama", "static", *LOSSLESS[3]),
]
HEAD_CASES = [(*c, False) for c in HEAD_CASES] + [(*c, True) for c in FUSED_HEAD_CASES]


@pytest.mark.parametrize("arch,path,method,params,fused", HEAD_CASES, ids=lambda v: str(v))
def test_lossless_with_a_head_draft(arch, path, method, params, fused):
    build = tiny_llama if arch == "llama" else tiny_opt
    target = build(0, VOCAB, sharpness=3.0)
    head = tiny_head(target, 1, sharpness=3.0, fused=fused, own_output=fused)
    processing = PAPER if arch == "opt" else NO_TRUNCATION
    counts = empirical(method, target, head, {**params, **processing}, runs=DRAFT_RUNS, decode_path=path)
    check(counts, exact_probs(target, processing), f"head/{arch}/{path}/{method}/{params}/{processing}/fused={fused}")


@pytest.mark.parametrize("method,params", [LOSSLESS[1], LOSSLESS[3]], ids=lambda v: str(v))
def test_lossless_with_a_restricted_head_when_supports_partly_overlap(method, params):
    """A head over 3 of the 4 tokens (q = 0 on token 2, which p keeps) under top-k 3 on both
    sides (the target drops token 3, which the head keeps)."""
    target = tiny_llama(0, VOCAB, sharpness=10.0)
    head = tiny_head(target, 1, sharpness=10.0, head_token_ids=[0, 1, 3])
    with torch.no_grad():
        p = logits_to_probs(target(input_ids=PROMPT).logits[0, -1], **TOP3)
        f = target(input_ids=PROMPT, output_hidden_states=True).hidden_states[-1]
        q = logits_to_probs(head.expand_logits(head.head_logits(head.unroll(PROMPT, f)[0][0, -1])), **TOP3)
    assert ((q > 0) & (p == 0)).any() and ((p > 0) & (q == 0)).any() and ((p > 0) & (q > 0)).any()
    counts = empirical(method, target, head, {**params, **TOP3}, decode_path="static")
    check(counts, exact_probs(target, TOP3), f"partial-overlap/head/{method}/{params}")


TOP2 = {"temperature": 1.0, "top_k": 2, "top_p": 1.0}


@pytest.mark.parametrize("method,params", [LOSSLESS[0], LOSSLESS[1], LOSSLESS[3]], ids=lambda v: str(v))
def test_lossless_when_q_is_processed_on_a_restricted_heads_tokens(method, params):
    """Top-k 2 below the head's 3 tokens: q is processed on the head's logits alone
    (`logits.Support`), its ids mapped to the vocabulary's; the output stays the target's."""
    target = tiny_llama(0, VOCAB, sharpness=10.0)
    head = tiny_head(target, 1, sharpness=10.0, head_token_ids=[0, 1, 3])
    counts = empirical(method, target, head, {**params, **TOP2}, decode_path="static")
    check(counts, exact_probs(target, TOP2), f"restricted-processing/head/{method}/{params}")


# the same tests on a q4_1 target (its Linears in the int4 CPU kernel, its head in the int8 one:
# mtad/models/quantized.py), exact w.r.t. that target: each lossless method once, both decode paths
QUANTIZED_CASES = [("eager", *LOSSLESS[0]), ("static", *LOSSLESS[1]), ("eager", *LOSSLESS[2]), ("static", *LOSSLESS[3])]
QUANTIZED_CASES = [(*c, "q4_1") for c in QUANTIZED_CASES]


# q4_1_bf16 (bf16 activations, scales and zeros): SpS and MTAD, eager path
QUANTIZED_CASES += [("eager", *LOSSLESS[0], "q4_1_bf16"), ("eager", *LOSSLESS[3], "q4_1_bf16")]


# int8 (every Linear requantized per row, one int8 kernel call each): SpS on both paths, and with bf16
# activations on the fast one
QUANTIZED_CASES += [
    ("eager", *LOSSLESS[0], "int8"),
    ("static", *LOSSLESS[0], "int8"),
    ("static", *LOSSLESS[0], "int8_bf16"),
]


@pytest.mark.parametrize("path,method,params,dtype", QUANTIZED_CASES)
def test_lossless_on_a_quantized_target(path, method, params, dtype):
    from mtad.models.quantized import KERNEL_DTYPES, quantize

    target = quantize(tiny_llama(0, VOCAB, sharpness=3.0), dtype)
    draft = tiny_llama(1, VOCAB, sharpness=3.0).to(KERNEL_DTYPES[dtype])
    counts = empirical(method, target, draft, {**params, **NO_TRUNCATION}, runs=DRAFT_RUNS, decode_path=path)
    check(counts, exact_probs(target, NO_TRUNCATION), f"{target.mtad_dtype}/{path}/{method}/{params}")


# adaptive drafting (stop_below): a drafted token whose q is below the threshold ends its branch.
# At V = 4 and sharpness 3 about a third of the drawn tokens fall below 0.3, so blocks of every
# depth occur; every lossless method once, a separate draft and a head, both decode paths.
ADAPTIVE = {"stop_below": 0.3}
ADAPTIVE_CASES = [
    ("llama", "static", "model", *LOSSLESS[0]),
    ("llama", "eager", "model", *LOSSLESS[1]),
    ("opt", "eager", "head", *LOSSLESS[2]),
    ("llama", "static", "head", *LOSSLESS[3]),
]


# SpecInfer's node budget (EAGLE-2's dynamic tree) with the threshold: which nodes get children
# depends on their draft path probability, so the budget must not bias the result either
ADAPTIVE_CASES += [
    (arch, path, kind, method, {**params, "node_budget": 6})
    for arch, path, kind, method, params in ADAPTIVE_CASES
    if method == "specinfer"
]


@pytest.mark.parametrize("arch,path,kind,method,params", ADAPTIVE_CASES, ids=lambda v: str(v))
def test_lossless_with_adaptive_drafting(arch, path, kind, method, params):
    from mtad.decoding import get_decoder

    build = tiny_llama if arch == "llama" else tiny_opt
    target = build(0, VOCAB, sharpness=3.0)
    draft = tiny_head(target, 1, sharpness=3.0) if kind == "head" else build(1, VOCAB, sharpness=3.0)
    settings = {**params, **ADAPTIVE, **NO_TRUNCATION}
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **settings)
    blocks = [
        decoder.generate(PROMPT, max_new_tokens=12, generator=torch.Generator().manual_seed(s)) for s in range(40)
    ]
    full_depth = len(params["k_config"]) if method == "specinfer" else params["gamma"]
    drafted = sum(o.stats.drafted for o in blocks) / sum(o.stats.target_calls for o in blocks)
    assert drafted < 0.9 * full_depth, f"the threshold stopped too few blocks to test anything ({drafted:.2f})"
    counts = empirical(method, target, draft, settings, runs=DRAFT_RUNS, decode_path=path)
    check(counts, exact_probs(target, NO_TRUNCATION), f"adaptive/{arch}/{path}/{kind}/{method}/{params}")
