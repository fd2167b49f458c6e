"""Logit processing as it ran before its optimisations, after top-k's selection: the references
that tests/test_process_16bit.py and tests/test_layer_math.py hold today's processing equal to."""

from __future__ import annotations

import torch

from mtad.decoding.logits import Dist, _top_p_filter


def processed_float_logits(logits: torch.Tensor, top_k: int, top_p: float, select_top_k) -> Dist:
    """Float32 `logits` [..., V] (temperature already applied) -> top-k by `select_top_k`, then
    top-p and the probabilities: on the k survivors, or dense without top-k."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        values, index = select_top_k(logits, top_k)
        kept = _top_p_filter(values, top_p).softmax(-1)
        ids, order = index.sort(-1)
        return Dist(ids, kept.gather(-1, order), vocab)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, _top_p_filter(sorted_logits, top_p))
    return Dist.dense_of(logits.softmax(-1))
