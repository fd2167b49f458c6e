"""Attention masks, bool (True = may attend) in SDPA's layout [B or 1, 1, Q, K].

Every mask is built from positions: a query at position p sees the key at position k when
k <= p - lag (`attends`), so a chain of n new rows after `start` cached slots is causal over
the cache (`chain_mask`); a tree node sees the whole committed chain and its own ancestors
(`tree_mask`); left-padding keys are seen by their own position only. The lean forwards take
the bool mask (padded to fixed shapes when compiled: `padded`); HF forwards take the additive
form, 0 where seen and the dtype's minimum elsewhere (`additive`).
"""

from __future__ import annotations

import torch


def attends(
    query_pos: torch.Tensor,
    key_pos: torch.Tensor,
    lag: int = 0,
    only: bool = False,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """query_pos [Q], key_pos [K] -> bool [1, 1, Q, K]: k <= p - lag (`only`: k == p - lag).
    key_valid [B, K] (False on padding) -> [B, 1, Q, K]: a padding key is seen at its own position only."""
    q, k = query_pos[:, None], key_pos[None, :]  # [Q, 1], [1, K]
    mask = ((k == q - lag) if only else (k <= q - lag))[None, None]  # [1, 1, Q, K]
    if key_valid is not None:
        mask = mask & (key_valid[:, None, None, :] | (k == q)[None, None])  # [B, 1, Q, K]
    return mask


def chain_mask(start: int, n: int) -> torch.Tensor:
    """bool [1, 1, n, start + n]: n new positions after `start` cached ones, causal."""
    return attends(torch.arange(start, start + n), torch.arange(start + n))


def step_mask(allowed: torch.Tensor | None, start: int, n: int, device: torch.device) -> torch.Tensor | None:
    """A lean forward's mask over the filled slots, bool [1, 1, n, start + n] on `device`: `allowed`
    (a tree), else the causal chain; None for one new row (it sees every filled slot)."""
    if allowed is None and n > 1:
        allowed = chain_mask(start, n)
    return None if allowed is None else allowed.to(device)


def tree_mask(committed: int, chain: int, ancestors: torch.Tensor) -> torch.Tensor:
    """bool [1, 1, chain + k, committed + chain + nodes]: `chain` new committed rows (causal) then k
    new tree nodes, each seeing the whole chain and its ancestors-or-self (ancestors: bool [k, nodes])."""
    c, m, (k, n) = committed, chain, ancestors.shape
    mask = torch.zeros(1, 1, m + k, c + m + n, dtype=torch.bool)  # [1, 1, Q, K]
    mask[..., :m, : c + m] = chain_mask(c, m)
    mask[..., m:, : c + m] = True
    mask[..., m:, c + m :] = ancestors
    return mask


def padded(mask: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """bool [1, 1, n, kv] in the corner of [1, 1, rows, cols] (fixed shapes); a pad row sees slot 0
    only (an all-masked row is NaN)."""
    n, kv = mask.shape[-2:]
    out = torch.zeros(1, 1, rows, cols, dtype=torch.bool)  # [1, 1, Q, K]
    out[..., :n, :kv] = mask
    out[..., n:, 0] = True
    return out


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool [B, 1, Q, K] -> additive [B, 1, Q, K] in `dtype`: 0 where seen, finfo(dtype).min elsewhere."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
