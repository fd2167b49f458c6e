"""Block verification (`blockverify`) reproduces the target distribution end to end: empirical vs
enumerated, on tiny models, as tests/test_decoding_exact.py and tests/test_lookup_exact.py do for the
other lossless methods.

N seeded generations of 3 tokens with γ = 2, so the third token is the bonus whenever the first block
is kept whole; the exact law of (x1, x2, x3) is enumerated with the target. A chi-square test with
false-alarm rate 1e-3 (fixed seeds: the outcome is deterministic) must not reject; the TV distance is
printed (run with -s). The cases: a different draft on each decode path (eager, static, fast) and
architecture, processed (top-k 3, top-p 0.9, sharper models) and not; supports that partly overlap
(q has mass where p has none); disjoint supports (every block keeps nothing: τ = 0, the residual is
p); the draft equal to the target (every block kept whole: the 0/0 acceptance and the bonus); a
feature head; adaptive drafting (`stop_below` 0.3 ends chains after one token); prompt lookup alone
(point masses) and before a draft model.

Power (alpha = 1e-3), from the exact laws of the wrong rules on each case (`tests/block_laws.py`
enumerates them as the decoder runs them, block after block; `chisquare_power`):
  * the bonus token drawn from the last draft row instead of the row after the block: > 0.999 on
    every model-draft case but the disjoint one, the adaptive and the draft = target ones included
    (TV 0.04 to 0.13), and on lookup before a model; 0.01 on lookup alone (its bonus follows two
    copied tokens the target rarely keeps);
  * the known wrong block rules (tests/test_blockverify.py, where the rule itself is enumerated,
    catches each of them exactly): at γ = 2 they move most cases little. SpS's token-wise acceptance
    with the block residual: 0.9997 on OPT at top-k 3 and sharpness 5 and 1.0 on lookup before a
    model (N = 2000; `test_a_wrong_rule_fails_end_to_end` runs it there and it fails), 0.18 on
    partial overlap, 0.001 elsewhere; the residual without p_τ: 0.67 and 0.86 on those two, 0.05
    and less elsewhere; the weights read as acceptance probabilities: 1.0 on OPT, partial overlap
    and lookup before a model, 0.90 on lookup alone, 0.19 adaptive, 0.06 on Llama raw;
  * disjoint supports keep nothing with any of these rules (every weight is 0): that case checks the
    τ = 0 path and that no draft token comes out; the feature head's q past the first drafted
    position reads the head's own predicted feature, which the enumeration does not model: its
    power is not computed.
Slow (15 to 40 seconds per case on a shared 2-core CPU): ``make test`` runs them, ``make test-fast``
does not.
"""

import pytest
import torch
from block_laws import ModelChain, lookup_drafts, model_drafts, output_law, target_law, tokenwise_then_block_residual

from mtad.decoding.blockverify import BlockVerification
from mtad.decoding.lookup import PromptLookup
from mtad.metrics.exact_enumeration import empirical_counts, sequence_probs
from mtad.models.tiny import biased_llama, tiny_head, tiny_llama, tiny_opt
from mtad.stats.goodness_of_fit import chisquare_exactness, chisquare_power

pytestmark = pytest.mark.slow

VOCAB, TOKENS, GAMMA, FALSE_ALARM = 4, 3, 2, 1e-3
PROMPT, REPEATED, SHORT_COPY = [1, 3, 2], [1, 3, 2, 1, 3], [1, 2, 3, 3]
NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
PAPER = {"temperature": 1.0, "top_k": 3, "top_p": 0.9}
TOP3 = {"temperature": 1.0, "top_k": 3, "top_p": 1.0}
NEG = float("-inf")


def models(case: str):
    """(target, draft model or None, draft kind) of a case: 'model', 'head', 'lookup' or 'lookup+model'."""
    llama, opt = (
        (lambda seed, s=3.0: tiny_llama(seed, VOCAB, sharpness=s)),
        (lambda seed, s=3.0: tiny_opt(seed, VOCAB, sharpness=s)),
    )
    if case == "disjoint":
        bias = torch.tensor([0, 0, NEG, NEG]), torch.tensor([NEG, NEG, 0, 0])
        return biased_llama(0, bias[0], sharpness=3.0), biased_llama(1, bias[1], sharpness=3.0), "model"
    if case == "draft=target":
        target = biased_llama(0, torch.zeros(VOCAB), sharpness=3.0)
        return target, target, "model"
    if case == "head":
        target = llama(0)
        return target, tiny_head(target, 1, sharpness=3.0), "head"
    return {
        "llama": (llama(0), llama(1), "model"),
        "opt sharp": (opt(0, 5.0), opt(1, 5.0), "model"),
        "partial overlap": (llama(0, 10.0), llama(3, 10.0), "model"),
        "lookup": (llama(0), None, "lookup"),
        "lookup+model": (opt(0), opt(1), "lookup+model"),
    }[case]


CASES = [  # case, decode path, processing, prompt, settings, runs
    ("llama", "eager", NO_TRUNCATION, PROMPT, {}, 1500),
    ("llama", "static", NO_TRUNCATION, PROMPT, {}, 1500),
    ("llama", "fast", NO_TRUNCATION, PROMPT, {}, 1500),
    ("opt sharp", "eager", PAPER, PROMPT, {}, 2000),
    ("partial overlap", "static", TOP3, PROMPT, {}, 1500),
    ("disjoint", "eager", NO_TRUNCATION, PROMPT, {}, 1000),
    ("draft=target", "static", NO_TRUNCATION, PROMPT, {}, 1000),
    ("head", "static", NO_TRUNCATION, PROMPT, {}, 1500),
    ("llama", "static", NO_TRUNCATION, PROMPT, {"stop_below": 0.3}, 1500),
    ("lookup", "eager", NO_TRUNCATION, REPEATED, {}, 2000),
    ("lookup+model", "eager", PAPER, SHORT_COPY, {}, 2000),
]


def draft_of(case: str, draft):
    """What the decoder is given as its draft: the model, or a prompt lookup (before the model)."""
    kind = models(case)[2]
    return PromptLookup(max_ngram=3, min_ngram=1, model=draft) if kind.startswith("lookup") else draft


def check(case, path, processing, prompt, settings, runs):
    target, draft, _ = models(case)
    params = {"gamma": GAMMA, **settings, **processing}
    prompt_ids = torch.tensor([prompt])
    counts = empirical_counts("blockverify", target, draft_of(case, draft), params, prompt_ids, TOKENS, runs, path)
    result = chisquare_exactness(counts, sequence_probs(target, prompt_ids, TOKENS, processing))
    label = f"blockverify/{case}/{path}/{processing}/{prompt}/{settings}"
    print(f"\n[exactness] {label}: TV={result.tv:.4f} chi2 p={result.pvalue:.3g} (N={result.runs})")
    return result, label


@pytest.mark.parametrize("case,path,processing,prompt,settings,runs", CASES, ids=lambda v: str(v))
def test_blockverify_is_lossless(case, path, processing, prompt, settings, runs):
    if settings.get("stop_below"):  # chains of both lengths occur, so the shorter block is exercised
        chain = ModelChain(*models(case)[:2], prompt, processing)
        assert {len(d) for d, _, _ in model_drafts(chain, GAMMA, settings["stop_below"])(())} == {1, 2}
    result, label = check(case, path, processing, prompt, settings, runs)
    assert result.impossible == 0, f"{label}: tokens emitted that have zero target probability"
    assert result.pvalue > FALSE_ALARM, f"{label}: differs from the target (p={result.pvalue:.2e}, TV={result.tv:.3f})"


def test_a_wrong_rule_fails_end_to_end(monkeypatch):
    """SpS's token-wise acceptance with the block residual, run by the decoder on the case where the
    enumeration gives the test power >= 0.999: the test rejects it."""
    case, path, processing, prompt, settings, runs = CASES[3]
    target, draft, _ = models(case)
    chain = ModelChain(target, draft, prompt, processing)
    wrong = output_law("token-wise acceptance, block residual", chain, model_drafts(chain, GAMMA), TOKENS)
    assert chisquare_power(target_law(chain, TOKENS), wrong, runs, FALSE_ALARM) > 0.999
    monkeypatch.setattr(
        BlockVerification, "verify", lambda self, p, q, d: tokenwise_then_block_residual(p, q, d, self.generator)
    )
    result, label = check(case, path, processing, prompt, settings, runs)
    assert result.pvalue < FALSE_ALARM, f"{label}: a wrong rule passed (p={result.pvalue:.2e})"


STATED_POWER = {  # case -> {wrong rule: the power the docstring states, at least}
    "opt sharp": {"token-wise acceptance, block residual": 0.999, "bonus from the last draft row": 0.999},
    "lookup+model": {"token-wise acceptance, block residual": 0.999, "residual without p_τ": 0.85},
    "lookup": {"weights as acceptance probabilities": 0.89},
    "draft=target": {"bonus from the last draft row": 0.999},
}


@pytest.mark.parametrize("case", list(STATED_POWER))
def test_the_stated_power(case):
    _, path, processing, prompt, settings, runs = next(c for c in CASES if c[0] == case)
    target, draft, kind = models(case)
    chain = ModelChain(target, draft if draft is not None else target, prompt, processing)
    propose = model_drafts(chain, GAMMA) if kind == "model" else lookup_drafts(chain, GAMMA, kind == "lookup+model")
    exact = target_law(chain, TOKENS)
    for rule, power in STATED_POWER[case].items():
        name = "block acceptance, residual without p_τ" if rule == "residual without p_τ" else rule
        assert chisquare_power(exact, output_law(name, chain, propose, TOKENS), runs, FALSE_ALARM) >= power, rule
