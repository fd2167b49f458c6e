"""Block verification (`blockverify`, `acceptance.block_verify`): its law enumerated exactly.

On chains whose next-token distributions can be listed (hand-made conditionals over 3 tokens, a third
of the rows missing a token, so that q has mass where p has none and the reverse; the tiny float64
models over 4 tokens), every draft and every outcome of a rule is enumerated with the library's own
`block_acceptance` and `block_residual`, and the law of the first n tokens, every block after the
first included, is compared with the target's: equal to 1e-12 for block verification, off for the
known wrong rules (a residual without p_τ's scaling, as vllm-ascend's first version drew it; SpS's
token-wise acceptance with the block residual). The expected length a block keeps is enumerated the
same way: it equals the paper's closed form Σ_i E_Q[p_i] and is never below SpS's on the same drafts
(the paper's two-token example: 11/9 against 10/9).

The sampled rule (`block_verify` with its uniforms) is checked against the enumerated law by a
chi-square test (false alarm 1e-3, fixed seeds) at N = SAMPLED_RUNS, with its power against each
wrong rule computed from their exact laws (`chisquare_power`, asserted >= 0.999) and the wrong rules'
own draws rejected by the same test.

Hierarchical speculative decoding (Zhou et al., arXiv 2601.05724, ICLR 2026) with capped branch
resampling: its acceptance probabilities (Eq. 19) and resampling distribution (Eq. 20), written from
the paper's definitions 4-6, are block verification's; the variant of the paper's listing, which
accepts the whole draft with the uncapped ratio min(1, r(X^γ)), is not exact.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
import torch
from block_laws import (
    RULES,
    WRONG,
    Chain,
    ContextFree,
    ModelChain,
    PointMasses,
    lookup_drafts,
    model_drafts,
    output_law,
    target_law,
    tokenwise_then_block_residual,
)

from mtad.decoding import acceptance
from mtad.decoding.acceptance import block_acceptance, block_residual, block_verify, block_weights
from mtad.decoding.logits import Dist, as_dist, sample
from mtad.models.tiny import tiny_llama
from mtad.stats.goodness_of_fit import chisquare_exactness, chisquare_power, tv

FALSE_ALARM = 1e-3
SAMPLED_SEED, SAMPLED_RUNS = 4, 2000  # the sampled test's chain (γ = 3, 4 tokens) and its draws
PROCESSINGS = {
    "raw": {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
    "top-3": {"temperature": 1.0, "top_k": 3, "top_p": 1.0},
}


def p_rows(chain: Chain, prefix: tuple, draft: tuple) -> Dist:
    """p at the draft's positions and after it [γ+1, V]."""
    return as_dist(torch.stack([chain.p(prefix + draft[:i]) for i in range(len(draft) + 1)]))


@pytest.mark.parametrize("gamma", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_verification_keeps_the_target_law_exactly(seed, gamma):
    chain = Chain(seed)
    law, exact = output_law("blockverify", chain, model_drafts(chain, gamma), gamma + 1), target_law(chain, gamma + 1)
    assert (law - exact).abs().max() < 1e-12
    assert (
        output_law("sps", chain, model_drafts(chain, gamma), gamma + 1) - exact
    ).abs().max() < 1e-12  # the enumeration itself


@pytest.mark.parametrize("chain", [PointMasses(3), Chain(4)], ids=["point masses", "adaptive"])
def test_exact_with_copied_tokens_and_with_a_chain_the_drafts_confidence_ends(chain):
    """A point-mass q (a copied token; its weights are Π p(X_j)) and chains that stop after a token whose
    q is below 0.4 (γ' < γ, read from the draft alone)."""
    stop = 0.4 if type(chain) is Chain else 0.0
    if stop:
        lengths = [len(d) for d, _, _ in model_drafts(chain, 3, stop)(())]
        assert min(lengths) < 3 and max(lengths) == 3  # chains of several lengths
    assert (
        output_law("blockverify", chain, model_drafts(chain, 3, stop), 4) - target_law(chain, 4)
    ).abs().max() < 1e-12


@pytest.mark.parametrize("prompt,with_model", [([1, 3, 2, 1, 3], False), ([1, 3, 2, 1, 3], True), ([1, 2, 3, 3], True)])
def test_exact_with_prompt_lookup_on_tiny_models(prompt, with_model):
    """Copied tokens (a recurring bigram copies two, a recurring token one), then the draft's chain."""
    target, draft = tiny_llama(0, 4, sharpness=3.0), tiny_llama(1, 4, sharpness=3.0)
    chain = ModelChain(target, draft, prompt, PROCESSINGS["raw"])
    assert len(lookup_drafts(chain, 2, with_model)(())[0][0]) == 2  # the first block copies (and drafts)
    law = output_law("blockverify", chain, lookup_drafts(chain, 2, with_model), 3)
    assert (law - target_law(chain, 3)).abs().max() < 1e-12


@pytest.mark.parametrize("rule", WRONG)
def test_the_known_wrong_rules_are_not_exact(rule):
    chain = Chain(SAMPLED_SEED)
    assert tv(output_law(rule, chain, model_drafts(chain, 3), 4), target_law(chain, 4)) > 0.005


def expected_length(rule: str, chain: Chain, gamma: int) -> float:
    """E[τ] of one block from the empty prefix, every draft enumerated."""
    lengths = RULES[rule][0]
    total = 0.0
    for draft, q_prob, q_rows in model_drafts(chain, gamma)(()):
        p, q = p_rows(chain, (), draft), as_dist(q_rows)
        total += q_prob * sum(i * prob for i, prob in enumerate(lengths(p, q, torch.tensor(draft))))
    return total


def closed_form(chain: Chain, gamma: int) -> float:
    """The paper's E[τ] = Σ_i E_{X^i ~ Q}[p_i(X^i)], over every drafted prefix."""
    total = 0.0
    for i in range(1, gamma + 1):
        for prefix in itertools.product(range(chain.vocab), repeat=i):
            q_tok = torch.stack([chain.q(prefix[:j])[prefix[j]] for j in range(i)])
            p_tok = torch.stack([chain.p(prefix[:j])[prefix[j]] for j in range(i)])
            if float(q_tok.prod()) > 0:
                total += float(q_tok.prod()) * float(block_weights(p_tok, q_tok)[-1])
    return total


def test_the_papers_two_token_example():
    """p = (1/3, 2/3), q = (2/3, 1/3) after every prefix, γ = 2: SpS keeps 10/9 tokens per block,
    block verification 11/9 (the paper's motivating example)."""
    chain = ContextFree([1 / 3, 2 / 3], [2 / 3, 1 / 3])
    assert Fraction(expected_length("sps", chain, 2)).limit_denominator(100) == Fraction(10, 9)
    assert Fraction(expected_length("blockverify", chain, 2)).limit_denominator(100) == Fraction(11, 9)
    assert closed_form(chain, 2) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("processing", list(PROCESSINGS))
@pytest.mark.parametrize("gamma", [2, 3])
def test_expected_length_is_the_closed_form_and_at_least_spss_on_tiny_models(gamma, processing):
    target, draft = tiny_llama(0, 4, sharpness=3.0), tiny_llama(1, 4, sharpness=3.0)
    chain = ModelChain(target, draft, [1, 3, 2], PROCESSINGS[processing])
    block, sps = expected_length("blockverify", chain, gamma), expected_length("sps", chain, gamma)
    assert block == pytest.approx(closed_form(chain, gamma), abs=1e-12)
    assert block > sps + 1e-3, (block, sps)  # strictly more here; never less (the paper's theorem)
    assert (output_law("blockverify", chain, model_drafts(chain, gamma), 3) - target_law(chain, 3)).abs().max() < 1e-12


def test_point_masses_keep_spss_expected_length():
    """With a copied draft every ratio p/q is at most 1: both rules keep Σ_i Π_{j<=i} p(X_j)."""
    chain = PointMasses(5)
    assert expected_length("blockverify", chain, 3) == pytest.approx(expected_length("sps", chain, 3), abs=1e-12)


def sampled_counts(verify, chain: Chain, gamma: int, n_tokens: int, runs: int) -> torch.Tensor:
    """[V^n] counts of the first n tokens over `runs` decodes (seed 0): each block draws γ tokens
    from q and runs `verify(p, q, draft, generator)`."""
    generator, counts = torch.Generator().manual_seed(0), torch.zeros(chain.vocab**n_tokens, dtype=torch.float64)
    for _ in range(runs):
        out: tuple = ()
        while len(out) < n_tokens:
            draft: tuple = ()
            for _ in range(gamma):
                draft += (int(sample(chain.q(out + draft), generator)),)
            p, q = p_rows(chain, out, draft), as_dist(torch.stack([chain.q(out + draft[:i]) for i in range(gamma)]))
            n, token = verify(p, q, torch.tensor(draft), generator)
            out += draft[:n] + (token,)
        counts[sum(t * chain.vocab ** (n_tokens - 1 - i) for i, t in enumerate(out[:n_tokens]))] += 1
    return counts


def test_the_sampled_rule_draws_the_target_and_the_test_rejects_the_wrong_rules(monkeypatch):
    """block_verify's own draws pass the chi-square test against the target's law; the wrong rules'
    draws fail it, as their exact laws say they must (power >= 0.999 at SAMPLED_RUNS)."""
    chain = Chain(SAMPLED_SEED)
    exact = target_law(chain, 4)
    right = chisquare_exactness(sampled_counts(block_verify, chain, 3, 4, SAMPLED_RUNS), exact)
    print(f"\n[exactness] block_verify: TV={right.tv:.4f} chi2 p={right.pvalue:.3g} (N={right.runs})")
    assert right.impossible == 0 and right.pvalue > FALSE_ALARM, right
    for rule in WRONG:
        assert (
            chisquare_power(exact, output_law(rule, chain, model_drafts(chain, 3), 4), SAMPLED_RUNS, FALSE_ALARM)
            > 0.999
        ), rule
    unscaled = acceptance.block_residual
    monkeypatch.setattr(acceptance, "block_residual", lambda p, q, weight: unscaled(p, q, 1.0))
    wrong = {WRONG[0]: block_verify, WRONG[1]: tokenwise_then_block_residual}
    for rule, verify in wrong.items():
        result = chisquare_exactness(sampled_counts(verify, chain, 3, 4, SAMPLED_RUNS), exact)
        print(f"[exactness] {rule}: TV={result.tv:.4f} chi2 p={result.pvalue:.3g} (N={result.runs})")
        assert result.pvalue < FALSE_ALARM, (rule, result)


def joint(chain: Chain, which: str, tokens: tuple) -> float:
    """P(tokens) or Q(tokens): the product of the chain's conditionals."""
    rows = getattr(chain, which)
    return float(torch.prod(torch.stack([rows(tokens[:i])[tokens[i]] for i in range(len(tokens))]))) if tokens else 1.0


def hsd_branch(chain: Chain, draft: tuple, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """HSD's capped branch after X_{1:t} (Zhou et al., Definitions 4-6), per token x: the capped
    target mass q(X_{1:m}) p(X_{m+1:t} x | X_{1:m}), with m the prefix (1 <= m <= t) of largest
    ratio r(X_{1:m}) = P/Q where it exceeds 1, else 0 (Definition 4 for X_{1:t+1}), and the draft's
    mass Q(X_{1:t} x). Where Q > 0, (r* − 1) q of Definition 6 is their difference."""
    ratios = [joint(chain, "p", draft[:i]) / joint(chain, "q", draft[:i]) for i in range(1, t + 1)]
    m = 1 + max(range(t), key=lambda i: ratios[i]) if t and max(ratios) > 1 else 0
    capped = joint(chain, "q", draft[:m]) * joint(chain, "p", draft[:t]) / joint(chain, "p", draft[:m])
    return capped * chain.p(draft[:t]), joint(chain, "q", draft[:t]) * chain.q(draft[:t])  # [V], [V]


def hsd_rule(chain: Chain, draft: tuple) -> tuple[list[float], list[torch.Tensor]]:
    """HSD's acceptance probabilities h_1..h_γ (Eq. 19: D*(p, q | X_{1:t}) / D*(q, p | X_{1:t}) for
    t < γ, min(r*(X_{1:γ}), 1) at γ) and its resampling distributions after X_{1:τ}, τ = 0..γ-1 (Eq. 20)."""
    gamma, h, residuals = len(draft), [], []
    for t in range(gamma):
        capped, drafted = hsd_branch(chain, draft, t)
        deficit, excess = (capped - drafted).clamp_min(0), (drafted - capped).clamp_min(0)  # [V] each
        residuals.append(deficit / deficit.sum())
        if t:
            h.append(float(deficit.sum() / excess.sum()))
    capped, drafted = hsd_branch(chain, draft[:-1], gamma - 1)
    h.append(min(float(capped[draft[-1]] / drafted[draft[-1]]), 1.0))  # r*(X_{1:γ})
    return h, residuals


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_hierarchical_speculative_decoding_is_block_verification(seed):
    """HSD with capped branch resampling, written from its definitions, gives block verification's h_i
    and residuals on every draft of γ = 3 (so its single-draft rule is not a method of its own here)."""
    chain = Chain(seed)
    for draft, _, q_rows in model_drafts(chain, 3)(()):
        p, q = p_rows(chain, (), draft), as_dist(q_rows)
        weights, h = block_acceptance(p, q, torch.tensor(draft))
        hsd_h, hsd_residuals = hsd_rule(chain, draft)
        for t, row in enumerate(hsd_residuals):
            if t and not h[t - 1] > 0:
                continue  # τ = t never kept: no residual drawn there
            ours = block_residual(p[t], q[t], weights[t - 1] if t else 1.0)
            assert torch.allclose(ours.dense() / ours.probs.sum(), row, atol=1e-12), (draft, t)
        assert torch.allclose(h, torch.tensor(hsd_h, dtype=h.dtype), atol=1e-12), draft


def test_hsds_listing_with_the_uncapped_ratio_is_not_exact():
    """The paper's listing accepts the whole draft with min(1, r(X^γ)), not min(1, r*(X^γ)) = p_γ."""

    def uncapped(p: Dist, q: Dist, draft: torch.Tensor) -> list[float]:
        h = block_acceptance(p, q, draft)[1]
        h[-1] = min(1.0, float((p[: len(draft)].prob_of(draft) / q.prob_of(draft)).prod()))
        probs, none_above = [0.0] * (len(h) + 1), 1.0
        for i in range(len(h), 0, -1):
            probs[i], none_above = none_above * float(h[i - 1]), none_above * (1 - float(h[i - 1]))
        return [none_above] + probs[1:]

    RULES["hsd listing"] = (uncapped, True, 0)
    try:
        chain = Chain(SAMPLED_SEED)
        assert tv(output_law("hsd listing", chain, model_drafts(chain, 3), 4), target_law(chain, 4)) > 0.005
    finally:
        del RULES["hsd listing"]
