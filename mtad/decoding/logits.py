"""Turning logits into the *processed* distributions p and q (temperature -> top-k -> top-p).

Every method applies the same processing to the target (p) and the draft (q), so the
acceptance rules compare like with like. Temperature 0 means greedy: the processed
distribution is the one-hot of the argmax, which turns every lossless rule into its
greedy variant (accept iff the draft token is the argmax; the residual is the argmax).
"""

from __future__ import annotations

import torch


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature, top-k, top-p."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        # work on the k survivors only: top-p then needs a sort of k values, not of V
        values, index = torch.topk(logits, top_k, dim=-1)  # [..., k], sorted descending
        kept = _top_p_filter(values, top_p).softmax(-1)  # [..., k]
        return torch.zeros_like(logits).scatter(-1, index, kept)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, _top_p_filter(sorted_logits, top_p))
    return logits.softmax(-1)


def _top_p_filter(sorted_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (-inf) the tail of descending-sorted logits outside the top-p nucleus."""
    if top_p >= 1.0:
        return sorted_logits
    sorted_probs = sorted_logits.softmax(-1)
    # drop a token once the mass *before* it already reaches top_p: keeps the smallest
    # prefix with mass >= top_p, and always the most likely token.
    drop = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
    return sorted_logits.masked_fill(drop, float("-inf"))


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of [..., V] probabilities; returns [...] long on probs' device.

    Inverse-CDF sampling: one cumulative sum and a binary search per row, with a uniform from
    `generator`. (torch.multinomial costs ~2 ms per call over 49152 tokens on a CPU.) A token
    of zero probability adds no width to the CDF, so it can never be drawn."""
    flat = probs.reshape(-1, probs.shape[-1]).double()  # [R, V]
    cdf = flat.cumsum(-1)  # [R, V]
    u = uniform(flat.shape[0], generator, probs.device).double()[:, None] * cdf[:, -1:]  # [R, 1]
    tokens = torch.searchsorted(cdf, u, right=True).clamp_max(flat.shape[-1] - 1)  # [R, 1]
    return tokens.reshape(probs.shape[:-1])


def sample_distinct(weights: torch.Tensor, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """`count` distinct indices drawn one after another, each in proportion to the remaining
    non-negative `weights` [n] (as torch.multinomial without replacement; fewer if fewer are
    non-zero). Gumbel-top-k on the non-zero entries only: one pass instead of a multinomial
    over all n (n = W x 49152 for beam sampling)."""
    support = weights.nonzero().flatten()  # [S]
    count = min(count, support.numel())
    u = uniform(support.numel(), generator, weights.device).clamp_min(1e-20)
    keys = weights[support].double().log() - (-u.double().log()).log()  # log w + Gumbel(0, 1)
    return support[torch.topk(keys, count).indices]


def uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """n draws from U[0, 1) taken from `generator` (on its own device), returned on `device`."""
    gen_device = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=gen_device).to(device)
