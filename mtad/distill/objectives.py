"""Distillation losses and the agreement statistics they aim at.

Notation: p is the target's distribution, known through its top-K log-probs per position
(`top_ids`, `top_logprobs`, [N, K], sorted); q the draft's over its head's tokens
(log q: [N, |head|]). The suite decodes with *processed* distributions (temperature 1,
top-k 10, top-p 0.9 — the paper's setting), and speculative sampling accepts a drafted token
with expected probability sum_x min(p'(x), q'(x)) = 1 - TV(p', q') on processed p', q'.
A small draft cannot match the target's whole 49k-token tail, so the losses differ in what
they ask it to match:

- ``kl_raw``:   KL(p~ || q), p~ = raw top-K p restricted to the head (the whole distribution);
- ``kl_paper``: KL(p' || q), p' = p processed with the paper's setting (its few likely tokens);
- ``tv_paper``: 1 - sum min(p', q') (the acceptance itself, q' processed the same way) plus
  0.1 * kl_paper: TV alone has no gradient towards a token p' wants but q' has cut off.
"""

from __future__ import annotations

import torch

from ..decoding.logits import logits_to_probs
from ..decoding.sampling import SAMPLING_PARAMS


def target_on_head(top_ids: torch.Tensor, probs: torch.Tensor, head_index: torch.Tensor) -> tuple:
    """Target probabilities over the top-K ids, restricted to the head and renormalised.
    Returns (head columns [N, K] clamped to >= 0, probabilities [N, K] with 0 off the head)."""
    cols = head_index[top_ids]  # [N, K], -1 where the head lacks the token
    p = probs * (cols >= 0)
    return cols.clamp_min(0), p / p.sum(-1, keepdim=True).clamp_min(1e-12)


def kl_on_head(logq: torch.Tensor, cols: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Mean over positions of sum_k p_k (log p_k - log q(col_k)): [N, |head|], [N, K], [N, K] -> []."""
    logq_at = logq.gather(-1, cols)  # [N, K]
    return (p * (torch.log(p.clamp_min(1e-12)) - logq_at)).sum(-1).mean()


def kl_raw(logq, top_ids, top_logprobs, head_index) -> torch.Tensor:
    cols, p = target_on_head(top_ids, top_logprobs.float().exp(), head_index)
    return kl_on_head(logq, cols, p)


def paper_target(top_ids, top_logprobs, head_index) -> tuple:
    """p' over the stored top-K (top-k 10 lies inside K, so p' is exact), restricted to the head."""
    return target_on_head(top_ids, logits_to_probs(top_logprobs.float(), **SAMPLING_PARAMS), head_index)


def kl_paper(logq, top_ids, top_logprobs, head_index) -> torch.Tensor:
    cols, p = paper_target(top_ids, top_logprobs, head_index)
    return kl_on_head(logq, cols, p)


def tv_paper(logq, top_ids, top_logprobs, head_index, kl_weight: float = 0.1) -> torch.Tensor:
    cols, p = paper_target(top_ids, top_logprobs, head_index)
    q = logits_to_probs(logq, **SAMPLING_PARAMS)  # [N, |head|], differentiable through the kept logits
    accept = torch.minimum(p, q.gather(-1, cols)).sum(-1)  # [N]: p' is 0 off its top-K, so this is sum_x min
    return (1 - accept).mean() + kl_weight * kl_on_head(logq, cols, p)


LOSSES = {"kl_raw": kl_raw, "kl_paper": kl_paper, "tv_paper": tv_paper}


def get_loss(name: str):
    if name not in LOSSES:
        raise ValueError(f"unknown distillation loss {name!r}; valid: {', '.join(LOSSES)}")
    return LOSSES[name]


def pair_stats(p_logits: torch.Tensor, q_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-position agreement between target and draft logits [N, V]: argmax agreement and the
    expected SpS acceptance sum_x min(p, q) at temperature 1 (``t1``) and the paper's setting."""
    stats = {"argmax_agree": (p_logits.argmax(-1) == q_logits.argmax(-1)).float()}
    for tag, setting in {"t1": {}, "paper": SAMPLING_PARAMS}.items():
        p, q = logits_to_probs(p_logits, **setting), logits_to_probs(q_logits, **setting)
        stats[f"accept_{tag}"] = torch.minimum(p, q).sum(-1)
    return stats
