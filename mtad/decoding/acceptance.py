"""The acceptance rules as pure tensor functions, testable on hand-made p and q.

Conventions: p is the processed target distribution, q the processed draft distribution,
each a `Dist` (on its support, as the decoders keep them) or a dense [V] (or [n, V]) float tensor
summing to 1; a rule returns a distribution of the kind it was given. The rules work on the union
of the two supports, a handful of entries under top-k. Randomness comes only from `generator`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mtad.decoding.logits import Dist, as_dist, sample, uniform
from mtad.decoding.phases import phased


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): the distribution to resample from after a rejection. [V]

    If p <= q everywhere (only when p == q up to rounding) no rejection can happen in
    exact arithmetic; fall back to p so rounding noise never yields an empty distribution.
    """
    excess = (p - q).clamp_min(0)
    mass = excess.sum()
    return torch.where(mass > 1e-12, excess / mass.clamp_min(1e-30), p)


@phased("accept")
def speculative_accept(
    p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[int, int]:
    """Speculative sampling (Leviathan/Chen) over a chain of γ draft tokens.

    p: [γ+1, V] target at each draft position plus the bonus position; q: [γ, V];
    draft: [γ] tokens drawn from q. Returns (accepted count n, next token): x_1..x_n are kept,
    then the token drawn from the residual at n+1, or the bonus from p_{γ+1} if all passed.
    """
    gamma = draft.shape[0]
    p, q = as_dist(p), as_dist(q)
    p_tok, q_tok = p[:gamma].prob_of(draft), q.prob_of(draft)  # [γ]
    # accept x_i with probability min(1, p/q): q >= p rejects sometimes, q < p always accepts
    passed = uniform(gamma, generator, p_tok.device) * q_tok < p_tok  # [γ]
    n = int(passed.long().cumprod(0).sum())  # leading run of acceptances (one host sync)
    if n < gamma:
        index, p_s, q_s = union(p[n], q[n])
        return n, int(sample(Dist(index, residual(p_s, q_s), p.vocab), generator))
    return n, int(sample(p[gamma], generator))


def union(p: Dist, q: Dist) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One row of p and of q on the union of their supports: (ids [S] ascending, p [S], q [S])."""
    index = torch.cat([p.ids, q.ids]).unique()  # sorted
    zeros = torch.zeros(index.shape, dtype=p.probs.dtype, device=p.probs.device)
    p_s = zeros.index_put((torch.searchsorted(index, p.ids),), p.probs)
    q_s = zeros.index_put((torch.searchsorted(index, q.ids),), q.probs.to(p.probs.dtype))
    return index, p_s, q_s


def block_weights(p_tok: torch.Tensor, q_tok: torch.Tensor) -> torch.Tensor:
    """Block verification's weights p_1..p_γ [γ] (float64) of a chain whose tokens have target and
    draft probabilities p_tok, q_tok [γ]: p_0 = 1, p_i = min(p_{i-1} · p(X_i)/q(X_i), 1)."""
    # unrolled, p_i = min over s <= i of r_{s+1} ... r_i (the empty product 1 at s = i): the prefix's
    # joint ratio r(X^i) = P(X^i)/Q(X^i) over its largest value so far, 1 included; in log space it
    # needs no loop, and a token the target gives nothing (log 0) zeroes every later weight
    log_ratio = (p_tok.double().log() - q_tok.double().log()).cumsum(0)  # [γ] log r(X^i)
    return (log_ratio - log_ratio.cummax(0).values.clamp_min(0)).exp()


def _at_ids_of(rows: Dist, q: Dist) -> torch.Tensor:
    """q's probabilities at the ids of `rows`, row by row ([n, k] like rows; 0 where q has none):
    both keep their ids ascending, so one batched binary search finds them."""
    if rows.ids.shape[-1] == rows.vocab == q.ids.shape[-1]:  # both dense: the same ids 0..V-1
        return q.probs.to(rows.probs.dtype)
    at = torch.searchsorted(q.ids, rows.ids.contiguous()).clamp_max(q.ids.shape[-1] - 1)  # [n, k]
    hit = q.ids.gather(-1, at) == rows.ids
    zero = torch.zeros((), dtype=rows.probs.dtype, device=rows.probs.device)
    return torch.where(hit, q.probs.gather(-1, at).to(rows.probs.dtype), zero)


def block_acceptance(p: Dist, q: Dist, draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification's weights p_1..p_γ and acceptance probabilities h_1..h_γ ([γ] each,
    float64) for a chain `draft` [γ] drawn from q [γ, k], with the target p [γ+1, k] at its positions.

    With Z_{i+1} = Σ_x max(p_i · p(x | X^i) − q(x | X^i), 0), the mass the residual after X^i keeps,
    h_i = Z_{i+1} / (Z_{i+1} + 1 − p_i) for i < γ and h_γ = p_γ. This makes P(τ >= i | X^i) = p_i
    for the length τ kept below: E[p_{i+1} | X^i] = Σ_x min(p_i p(x), q(x)) = p_i − Z_{i+1}, and
    (p_i − Z_{i+1}) + (1 − p_i + Z_{i+1}) · h_i = p_i. Where p_i = 1 and Z_{i+1} = 0 (p = q after
    X^i) h_i is 0/0: every later weight is then 1 until one has Z > 0, so some later h_j is 1 and
    h_i is never read; it is set to 1."""
    gamma = draft.shape[0]
    weights = block_weights(p[:gamma].prob_of(draft), q.prob_of(draft))  # [γ]
    rows = p[1:gamma]  # [γ-1, k]: p(· | X^i) for i = 1..γ-1
    scaled = weights[:-1, None] * rows.probs.double() - _at_ids_of(rows, q[1:gamma]).double()  # [γ-1, k]
    # x outside p's support adds max(−q(x), 0) = 0 to Z: summing over p's support is summing over all x
    kept = scaled.clamp_min(0).sum(-1)  # [γ-1] Z_2..Z_γ
    denominator = kept + 1 - weights[:-1]
    inner = torch.where(denominator > 0, kept / denominator.clamp_min(1e-300), torch.ones_like(kept))
    return weights, torch.cat([inner, weights[-1:]])


@phased("accept")
def block_verify(
    p: Dist | torch.Tensor, q: Dist | torch.Tensor, draft: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[int, int]:
    """Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh; ICLR 2025) of a
    chain of γ draft tokens, lossless: the same inputs and outputs as `speculative_accept`.

    p: [γ+1, V] target at each draft position plus the bonus position; q: [γ, V]; draft: [γ] drawn
    from q. With the weights p_i and acceptance probabilities h_i of `block_acceptance` and γ
    independent uniforms η_i, τ is the largest i with η_i < h_i (0 if none): x_1..x_τ are kept even
    where a token-wise test would have refused one of them. The next token comes from the residual
    norm(max(p_τ · p(· | X^τ) − q(· | X^τ), 0)) when τ < γ, else from p(· | X^γ) (p_0 = 1: SpS's
    residual). Returns (τ, next token).
    """
    gamma = draft.shape[0]
    p, q = as_dist(p), as_dist(q)
    weights, accept = block_acceptance(p, q, draft)  # [γ], [γ]
    passed = uniform(gamma, generator, accept.device).double() < accept  # [γ]
    n = int((passed * torch.arange(1, gamma + 1, device=accept.device)).max())  # the largest i passing (one sync)
    if n == gamma:
        return n, int(sample(p[gamma], generator))
    return n, int(sample(block_residual(p[n], q[n], weights[n - 1] if n else 1.0), generator))


def block_residual(p: Dist, q: Dist, weight: torch.Tensor | float) -> Dist:
    """Block verification's residual after the kept prefix X^τ: norm(max(p_τ · p − q, 0)) over one row
    of p and of q, with `weight` p_τ (1 at τ = 0: SpS's residual). A prefix kept with τ < γ has
    mass to resample (h_τ > 0 needs Z_{τ+1} > 0; τ = 0 happens only where p ≠ q); where rounding
    leaves none, `residual` falls back to p."""
    index, p_s, q_s = union(p, q)  # [S] each
    scaled = torch.as_tensor(weight, dtype=p_s.dtype, device=p_s.device) * p_s  # p_τ scales p before q comes off
    return Dist(index, residual(scaled, q_s), p.vocab)


def _support(p: Dist | torch.Tensor, q: Dist | torch.Tensor, candidates: list[int]):
    """Restrict p and q to the tokens of their supports (top-k/top-p leave a few; a dense row's
    support is where it is non-zero): the rules below then touch a handful of entries instead of
    the whole vocabulary. Returns (index [S], p [S], q [S], candidates as positions in the support)."""
    if isinstance(p, Dist) or isinstance(q, Dist):
        index, p_s, q_s = union(as_dist(p), as_dist(q))
    else:
        index = ((p > 0) | (q > 0)).nonzero().flatten()  # [S], sorted token ids
        p_s, q_s = p[index], q[index]
    where = torch.searchsorted(index, torch.tensor(candidates, dtype=index.dtype, device=index.device))
    return index, p_s, q_s, where.tolist()


def _scatter(index: torch.Tensor, values: torch.Tensor, like: Dist | torch.Tensor) -> Dist | torch.Tensor:
    """A rule's distribution on the support `index` as the kind `like` is: a Dist, or dense."""
    if isinstance(like, Dist):
        return Dist(index, values.to(like.probs.dtype), like.vocab)
    return torch.zeros_like(like).index_put_((index,), values.to(like.dtype))


@phased("accept")
def multi_draft_accept(
    p: Dist | torch.Tensor,
    q: Dist | torch.Tensor,
    candidates: list[int],
    replacement: bool = True,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """SpecInfer / MCSD verification of one tree node's children.

    p, q: [V] at the node; candidates: the children's tokens in order (i.i.d. from q when
    `replacement`, else drawn without replacement). Returns (index of the accepted child,
    or -1, and the distribution p' to sample from when every child was rejected).
    """
    index, p_s, q_s, cands = _support(p, q, candidates)
    j, p_res = _multi_draft_accept(p_s, q_s, cands, replacement, generator)
    return j, (p if j >= 0 else _scatter(index, p_res, p))


def _multi_draft_accept(p, q, candidates, replacement, generator):
    p_res, q_res = p, q
    draws = uniform(len(candidates), generator, p.device).tolist()
    for j, (token, u) in enumerate(zip(candidates, draws)):
        if u * float(q_res[token]) < float(p_res[token]):  # accept with min(1, p'/q')
            return j, p_res
        p_res = residual(p_res, q_res)  # p' <- norm(max(0, p' - q'))
        if not replacement:
            # the next sibling was drawn from q without this token: compare against that q
            q_res = q_res.clone()
            q_res[token] = 0
            mass = q_res.sum()
            q_res = q_res / mass if float(mass) > 0 else q_res
    return -1, p_res


def _kseq_gain(beta: torch.Tensor, k: int) -> torch.Tensor:
    """(1 - (1 - β)^k) / β written as Σ_{i<k} (1 - β)^i: stable at β -> 0 (limit k)."""
    powers = torch.arange(k, dtype=torch.float64, device=beta.device)
    return ((1 - beta.double()).unsqueeze(-1) ** powers).sum(-1)


def kseq_beta(p: torch.Tensor, q: torch.Tensor, rho: torch.Tensor | float) -> torch.Tensor:
    """β(ρ) = Σ_x min(q(x), p(x)/ρ), for a scalar or a [G] batch of ρ."""
    rho = torch.as_tensor(rho, dtype=torch.float64, device=p.device)
    return torch.minimum(q.double(), p.double() / rho.unsqueeze(-1)).sum(-1)


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: int, grid: int = 64, iters: int = 40) -> float:
    """ρ* = the smallest ρ in [1, k] with (1 - (1 - β(ρ))^k)/β(ρ) <= ρ (SpecTr, K-SEQ).

    The condition holds at ρ = k always. Scan a grid for the first point where it holds,
    then bisect in the bracket before it; return the upper end, where the condition holds,
    so the rule stays exact whatever the resolution. In numpy on the host: p and q are a
    node's support (a few entries), and the ~100 evaluations are too small for tensor ops.
    """
    if k == 1:
        return 1.0  # (1-(1-β))/β = 1 <= 1: K-SEQ reduces to speculative sampling
    p_np, q_np = p.double().cpu().numpy(), q.double().cpu().numpy()
    powers = np.arange(k, dtype=np.float64)

    def holds(rho: np.ndarray) -> np.ndarray:  # [G] -> [G]: the condition at each ρ
        beta = np.minimum(q_np, p_np / rho[:, None]).sum(-1)  # β(ρ) [G]
        return ((1 - beta)[:, None] ** powers).sum(-1) <= rho + 1e-12  # Σ_{i<k} (1-β)^i <= ρ

    rhos = np.linspace(1.0, float(k), grid)
    first = int(holds(rhos).argmax())  # the last point (ρ = k) holds
    if first == 0:
        return 1.0
    lo, hi = float(rhos[first - 1]), float(rhos[first])
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if holds(np.array([mid]))[0]:
            hi = mid
        else:
            lo = mid
    return hi


def kseq_residual(p: torch.Tensor, q: torch.Tensor, k: int, rho: float) -> torch.Tensor:
    """[p - min(q, p/ρ) (1 - (1-β)^k)/β] / (1-β)^k, checked non-negative, normalised. [V]"""
    beta = kseq_beta(p, q, rho)
    unnorm = p.double() - torch.minimum(q.double(), p.double() / rho) * _kseq_gain(beta, k)
    if float(unnorm.min()) < -1e-6:
        raise AssertionError(f"K-SEQ residual negative ({float(unnorm.min()):.3g}): ρ={rho} violates the condition")
    unnorm = unnorm.clamp_min(0)
    mass = float(unnorm.sum())
    # all-rejection has probability (1-β)^k; when it is ~0 any valid choice is fine, use p
    return (unnorm / mass).to(p.dtype) if mass > 1e-12 else p


@phased("accept")
def kseq_accept(
    p: Dist | torch.Tensor, q: Dist | torch.Tensor, candidates: list[int], generator: torch.Generator | None = None
) -> tuple[int, Dist | torch.Tensor]:
    """K-SEQ over k i.i.d. candidates from q (SpecTr). Returns (accepted index or -1, residual)."""
    index, p_s, q_s, cands = _support(p, q, candidates)
    j, p_res = _kseq_accept(p_s, q_s, cands, generator)
    return j, (p if j >= 0 else _scatter(index, p_res, p))


def _kseq_accept(p, q, candidates, generator):
    k = len(candidates)
    rho = kseq_rho(p, q, k)
    draws = uniform(k, generator, p.device).tolist()
    for j, (token, u) in enumerate(zip(candidates, draws)):
        if u * rho * float(q[token]) < float(p[token]):  # accept with min(1, p/(ρ q))
            return j, p
    return -1, kseq_residual(p, q, k, rho)


@phased("accept")
def mtad_accept_length(logp: torch.Tensor, logq: torch.Tensor, threshold: float) -> int:
    """MTAD: the largest d with r_d = Π_{j<=d} p_j(x_j) / Π_{j<=d} q_j(x_j) > τ, else 0.

    logp, logq: [γ] log-probabilities of the draft tokens. No random draw; a shorter prefix
    failing does not stop a longer one passing (the ratio is not monotone in d).
    """
    log_ratio = torch.cumsum(logp.double() - logq.double(), 0)  # [γ] log r_d
    passing = (log_ratio > math.log(threshold)).nonzero()
    return int(passing[-1]) + 1 if passing.numel() else 0


@phased("accept")
def best_column_denominator(log_q_path: torch.Tensor, depth: torch.Tensor, best_leaf: int) -> torch.Tensor:
    """The official implementation's MMTAD denominator: for every node, log Q(path) of the node at
    its depth in the column (beam slot) of ``best_leaf``, the best final beam. Nodes of one depth
    are contiguous, in slot order; a depth with fewer slots (no replacement, small support) uses
    its last. Inputs [N]; returns [N]."""
    starts = torch.searchsorted(depth, torch.arange(1, int(depth.max()) + 2, device=depth.device))  # [γ+1]
    column = best_leaf - int(starts[-2])
    at = torch.minimum(starts[:-1] + column, starts[1:] - 1)  # [γ] the column's node per depth
    return log_q_path[at][depth - 1]


@phased("accept")
def mmtad_select(log_p_path: torch.Tensor, log_q_path: torch.Tensor, depth: torch.Tensor, threshold: float) -> int:
    """MMTAD: among tree nodes with P(path)/Q(path) > τ take the deepest depth, then the
    node with the highest P(path) there. Inputs [N]; returns the node index or -1."""
    passing = (log_p_path.double() - log_q_path.double()) > math.log(threshold)
    if not bool(passing.any()):
        return -1
    deepest = depth[passing].max()
    candidates = passing & (depth == deepest)
    score = torch.where(
        candidates, log_p_path.double(), torch.full_like(log_p_path, float("-inf"), dtype=torch.float64)
    )
    return int(score.argmax())
