"""The pure acceptance rules on hand-made distributions (no model)."""

import pytest
import torch
from scipy.stats import chisquare

from mtad.decoding.acceptance import (
    _kseq_gain,
    kseq_accept,
    kseq_beta,
    kseq_residual,
    kseq_rho,
    mmtad_select,
    mtad_accept_length,
    multi_draft_accept,
    residual,
    speculative_accept,
)
from mtad.decoding.logits import logits_to_probs

P = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
Q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
FALSE_ALARM = 1e-3  # each chi-square test rejects a correct rule with this probability (fixed seeds)


def assert_matches(counts: torch.Tensor, probs: torch.Tensor):
    """Chi-square goodness of fit; cells with expected < 5 are pooled."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum(0, keepdim=True)]).double()
    exp = torch.cat([expected[big], expected[~big].sum(0, keepdim=True)]).double()
    keep = exp > 0
    result = chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item())
    assert result.pvalue > FALSE_ALARM, f"p-value {result.pvalue:.2e}; counts {counts.tolist()} vs {expected.tolist()}"


def test_logits_processing_temperature_topk_topp():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    assert torch.equal(logits_to_probs(logits, temperature=0), torch.tensor([1.0, 0, 0, 0, 0]))
    assert torch.allclose(logits_to_probs(logits), logits.softmax(-1))
    assert torch.allclose(logits_to_probs(logits, temperature=2.0), (logits / 2).softmax(-1))
    top2 = logits_to_probs(logits, top_k=2)
    assert (top2[2:] == 0).all() and torch.isclose(top2.sum(), torch.tensor(1.0))
    full = logits.softmax(-1)  # [0.61, 0.22, 0.14, ...]: top_p 0.8 keeps the first two (0.83 >= 0.8)
    nucleus = logits_to_probs(logits, top_p=0.8)
    assert (nucleus[:2] > 0).all() and (nucleus[2:] == 0).all()
    assert torch.allclose(nucleus[:2], full[:2] / full[:2].sum())
    assert (logits_to_probs(logits, top_p=0.01) > 0).sum() == 1  # always keeps the argmax


def test_residual_is_normalised_positive_part():
    r = residual(P, Q)
    expected = (P - Q).clamp_min(0)
    assert torch.allclose(r, expected / expected.sum())
    assert torch.allclose(residual(P, P), P)  # p == q: no rejection possible, fall back to p


def test_speculative_accept_output_is_p():
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(6000):  # γ = 1: the emitted first token must be distributed as p
        x = torch.multinomial(Q.float(), 1, generator=g)
        n, tok = speculative_accept(torch.stack([P, P]), Q[None], x, g)
        counts[x.item() if n == 1 else tok] += 1
    assert_matches(counts, P)


def test_speculative_accept_greedy_rule():

    def onehot(i: int) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(i), 4).double()

    p = torch.stack([onehot(1), onehot(2), onehot(3)])
    q = torch.stack([onehot(1), onehot(0)])
    n, tok = speculative_accept(p, q, torch.tensor([1, 0]))
    assert (n, tok) == (1, 2)  # accept while x_i = argmax p_i, then emit argmax p


@pytest.mark.parametrize("replacement", [True, False])
def test_multi_draft_accept_output_is_p(replacement):
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(4)
    for _ in range(6000):
        cands = torch.multinomial(Q.float(), 3, replacement=replacement, generator=g).tolist()
        j, p_res = multi_draft_accept(P, Q, cands, replacement, g)
        counts[cands[j] if j >= 0 else torch.multinomial(p_res.float(), 1, generator=g).item()] += 1
    assert_matches(counts, P)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_kseq_rho_is_smallest_valid_and_residual_nonnegative(k):
    rho = kseq_rho(P, Q, k)

    def holds(r: float) -> bool:
        return float(_kseq_gain(kseq_beta(P, Q, r), k)) <= r + 1e-12

    assert 1.0 <= rho <= k and holds(rho)
    if rho > 1.0 + 1e-6:
        assert not holds(rho - 1e-4), "a smaller ρ also satisfies the condition: ρ* is not the smallest"
    res = kseq_residual(P, Q, k, rho)
    assert (res >= 0).all() and torch.isclose(res.sum(), torch.tensor(1.0, dtype=res.dtype))
    if k == 1:
        assert rho == 1.0 and torch.allclose(res, residual(P, Q))  # K-SEQ with k = 1 is SpS


def test_kseq_residual_rejects_invalid_rho():
    with pytest.raises(AssertionError, match="negative"):
        kseq_residual(P, Q, 4, 1.0)  # ρ = 1 violates the condition for k = 4 here


def test_kseq_accept_output_is_p():
    g = torch.Generator().manual_seed(2)
    counts = torch.zeros(4)
    for _ in range(4000):
        cands = torch.multinomial(Q.float(), 3, replacement=True, generator=g).tolist()
        j, p_res = kseq_accept(P, Q, cands, g)
        counts[cands[j] if j >= 0 else torch.multinomial(p_res.float(), 1, generator=g).item()] += 1
    assert_matches(counts, P)


def test_mtad_longest_passing_prefix_even_after_a_failure():
    # r_1 = 0.4/0.8 = 0.5 (fails τ = 0.6), r_2 = 0.5 * 0.9/0.3 = 1.5 (passes), r_3 = 1.5 * 0.1/0.5 = 0.3
    logp = torch.tensor([0.4, 0.9, 0.1]).log()
    logq = torch.tensor([0.8, 0.3, 0.5]).log()
    assert mtad_accept_length(logp, logq, 0.6) == 2
    assert mtad_accept_length(logp, logq, 0.2) == 3
    assert mtad_accept_length(logp, logq, 1.0) == 2  # only r_2 = 1.5 exceeds 1
    assert mtad_accept_length(torch.tensor([0.1]).log(), torch.tensor([0.9]).log(), 0.5) == 0


def test_mmtad_deepest_passing_node_with_highest_target_path_probability():
    depth = torch.tensor([1, 1, 2, 2, 2, 3])
    log_p = torch.tensor([0.5, 0.4, 0.30, 0.35, 0.20, 0.01]).log()
    log_q = torch.tensor([0.5, 0.5, 0.10, 0.30, 0.20, 0.50]).log()
    # depth 3 fails (0.02 < τ); at depth 2 all pass with τ = 0.5; highest P is node 3
    assert mmtad_select(log_p, log_q, depth, 0.5) == 3
    # with τ = 1 only node 2 (ratio 3) and node 3 (ratio 1.17) pass: deepest 2, highest P -> 3
    assert mmtad_select(log_p, log_q, depth, 1.0) == 3
    assert mmtad_select(torch.tensor([0.01]).log(), torch.tensor([0.9]).log(), torch.tensor([1]), 0.5) == -1


def test_sample_distinct_is_sequential_sampling_without_replacement():
    from mtad.decoding.logits import sample_distinct

    w = torch.tensor([0.5, 0.3, 0.2, 0.0])
    g = torch.Generator().manual_seed(3)
    counts = torch.zeros(4, 4)
    for _ in range(6000):
        first, second = sample_distinct(w, 2, g).tolist()
        counts[first, second] += 1
    exact = torch.zeros(4, 4, dtype=torch.float64)
    for i in range(3):
        for j in range(3):
            if i != j:
                exact[i, j] = w[i] * w[j] / (1 - w[i])
    assert counts[3].sum() == counts[:, 3].sum() == 0  # zero weight never drawn
    assert_matches(counts.flatten(), exact.flatten())
    assert sample_distinct(w, 10, g).numel() == 3  # only as many as the support allows


def test_sample_follows_probs_and_never_draws_zero_probability():
    from mtad.decoding.logits import sample

    probs = torch.tensor([[0.0, 0.6, 0.0, 0.3, 0.1], [1.0, 0, 0, 0, 0]])
    g = torch.Generator().manual_seed(5)
    draws = torch.stack([sample(probs, g) for _ in range(5000)])  # [N, 2]
    assert (draws[:, 1] == 0).all()
    assert_matches(torch.bincount(draws[:, 0], minlength=5).float(), probs[0].double())


# ----------------------------------------------------------------------------- rules on a chain
def rows(*dists) -> torch.Tensor:
    return torch.tensor(dists, dtype=torch.float64)


# Position-indexed distributions (no dependence on earlier tokens), so the exact law of the first
# three emitted tokens is P[0] x P[1] x P[2]. Q = P: every block of γ = 2 is accepted and the
# third token is always the bonus; P[1] and P[2] differ by TV 0.03 where q is sharp, so a bonus
# drawn from the last draft row (P[1]) instead of the row after the block (P[2]) is a law at
# TV 0.03 from the exact one, chi2 divergence 0.043: at N = 3000, 64 cells, alpha = 1e-3 the
# test detects it with probability > 0.999 (noncentral chi-square, noncentrality 129).
CHAIN_P = rows(
    [0.1, 0.2, 0.3, 0.4],
    [0.06, 0.04, 0.45, 0.45],
    [0.03, 0.07, 0.45, 0.45],
    [0.25, 0.25, 0.25, 0.25],
    [0.4, 0.3, 0.2, 0.1],
)
CHAIN_Q = {
    "q=p": CHAIN_P,
    "q!=p": rows(
        [0.3, 0.3, 0.2, 0.2], [0.1, 0.1, 0.4, 0.4], [0.2, 0.1, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]
    ),
}


@pytest.mark.parametrize("draft", list(CHAIN_Q))
def test_speculative_chain_emits_p_including_the_bonus(draft):
    """SpS with γ = 2 run to three tokens over position-indexed p and q rows: the joint law of
    the three emitted tokens is P[0] x P[1] x P[2], bonus tokens included."""
    gamma, q_rows, g = 2, CHAIN_Q[draft], torch.Generator().manual_seed(7)
    counts = torch.zeros(4**3)
    for _ in range(3000):
        emitted = []
        while len(emitted) < 3:
            t = len(emitted)
            tokens = torch.stack([torch.multinomial(q_rows[t + i].float(), 1, generator=g)[0] for i in range(gamma)])
            n, token = speculative_accept(CHAIN_P[t : t + gamma + 1], q_rows[t : t + gamma], tokens, g)
            emitted += tokens[:n].tolist() + [token]
        counts[emitted[0] * 16 + emitted[1] * 4 + emitted[2]] += 1
    exact = (CHAIN_P[0][:, None, None] * CHAIN_P[1][None, :, None] * CHAIN_P[2][None, None, :]).flatten()
    assert_matches(counts, exact)


# q has mass (0.3) where p is 0 and p (0.3) where q is 0. After the draw of token 2 is rejected,
# q' without replacement keeps tokens 1 and 3; renormalising it over p's support only (a rule
# that is wrong exactly when q has mass outside p's support) moves the output to TV 0.042 from p
# (chi2 divergence 0.0084, measured at N = 30000): at N = 6000, 3 cells, alpha = 1e-3 the test
# detects it with probability 0.9998.
PARTIAL_P = torch.tensor([0.3, 0.5, 0.2, 0.0], dtype=torch.float64)
PARTIAL_Q = torch.tensor([0.0, 0.3, 0.4, 0.3], dtype=torch.float64)


@pytest.mark.parametrize("replacement", [True, False])
def test_multi_draft_accept_when_supports_partly_overlap(replacement):
    from mtad.decoding.logits import sample_distinct

    g = torch.Generator().manual_seed(11)
    counts = torch.zeros(4)
    for _ in range(6000):
        cands = (
            torch.multinomial(PARTIAL_Q.float(), 3, replacement=True, generator=g)
            if replacement
            else sample_distinct(PARTIAL_Q, 3, g)
        ).tolist()
        j, p_res = multi_draft_accept(PARTIAL_P, PARTIAL_Q, cands, replacement, g)
        counts[cands[j] if j >= 0 else torch.multinomial(p_res.float(), 1, generator=g).item()] += 1
    assert counts[3] == 0, "a token outside p's support was emitted"
    assert_matches(counts, PARTIAL_P)


def test_mmtad_official_denominator_takes_the_best_final_beams_column_at_each_depth():
    from mtad.decoding.acceptance import best_column_denominator

    log_q = torch.tensor([-1.0, -2, -3, -4, -5, -6, -7, -8])  # depth 1: nodes 0-2, depth 2: 3-5, depth 3: 6-7
    depth = torch.tensor([1, 1, 1, 2, 2, 2, 3, 3])
    # best final beam = node 7, column 1: nodes 1, 4 and 7 give their depth's denominator
    assert best_column_denominator(log_q, depth, 7).tolist() == [-2, -2, -2, -5, -5, -5, -8, -8]
    # best final beam = node 6, column 0
    assert best_column_denominator(log_q, depth, 6).tolist() == [-1, -1, -1, -4, -4, -4, -7, -7]


def test_mmtad_denominator_and_replacement_are_validated_with_the_valid_values():
    from mtad.decoding.mmtad import MMTAD

    assert MMTAD.settings().denominator == "best_column" and MMTAD.settings().replacement is True
    assert MMTAD.settings(denominator="node").denominator == "node"
    with pytest.raises(ValueError, match="best_column"):
        MMTAD.settings(denominator="own")
    with pytest.raises(ValueError, match="true or false"):
        MMTAD.settings(replacement="yes")
