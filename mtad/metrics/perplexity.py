"""Perplexity of generated outputs under the target's raw distribution (T = 1, no truncation)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mtad.stats.intervals import perplexity as perplexity_of_means


@torch.no_grad()
def sample_logprob(model, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> tuple[float, int]:
    """Sum of log p(output_t | prompt, output_<t) over the output tokens, and their number.

    One teacher-forced forward over prompt + output; the logits at position i predict token
    i + 1, so the output tokens are scored by the positions just before them.
    """
    if len(prompt_ids) == 0:
        raise ValueError("sample_logprob needs at least one prompt token to condition the first output token")
    if len(output_ids) == 0:
        return 0.0, 0
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(output_ids)], dtype=torch.long, device=device)  # [1, P+O]
    logits = _at_least_fp32(model(input_ids=ids).logits[0])  # [P+O, V]
    start = len(prompt_ids) - 1
    predicting = logits[start : ids.shape[1] - 1]  # [O, V]: the positions that predict the outputs
    logprobs = torch.log_softmax(predicting, dim=-1)  # raw distribution: T = 1, no top-k/top-p
    targets = ids[0, len(prompt_ids) :]  # [O]
    picked = logprobs.gather(1, targets[:, None])[:, 0]  # [O]
    return float(picked.sum()), int(targets.numel())


def _at_least_fp32(logits: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 logits are scored in fp32; fp32/fp64 keep their precision."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def mean_logprob(sum_logprob: float, n_tokens: int) -> float | None:
    """Per-token mean log-prob of one sample (None for an empty output)."""
    return sum_logprob / n_tokens if n_tokens else None


def perplexity(mean_logprobs: Sequence[float | None]) -> float | None:
    """exp(-mean) over samples of their per-token mean log-probs; empty outputs (None) skipped."""
    values = [v for v in mean_logprobs if v is not None]
    if not values:
        return None
    return float(perplexity_of_means(np.asarray(values, dtype=np.float64)))


@torch.no_grad()
def sample_logprobs(
    model, prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], batch_size: int = 8
) -> list[tuple[float, int]]:
    """``sample_logprob`` for many samples, ``batch_size`` sequences per forward.

    Sequences are right-padded (pads come after every real token, so causal attention and
    positions of the real tokens are unchanged) and pads are masked out of the attention.
    """
    if len(prompts) != len(outputs):
        raise ValueError("one output per prompt is needed")
    device = next(model.parameters()).device
    results: list[tuple[float, int]] = []
    for lo in range(0, len(prompts), batch_size):
        chunk = list(zip(prompts[lo : lo + batch_size], outputs[lo : lo + batch_size]))
        if any(len(p) == 0 for p, _ in chunk):
            raise ValueError("sample_logprobs needs at least one prompt token per sample")
        width = max(len(p) + len(o) for p, o in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long, device=device)  # [B, W]
        mask = torch.zeros_like(ids)  # [B, W]
        for row, (p, o) in enumerate(chunk):
            seq = list(p) + list(o)
            ids[row, : len(seq)] = torch.tensor(seq, device=device)
            mask[row, : len(seq)] = 1
        logits = _at_least_fp32(model(input_ids=ids, attention_mask=mask).logits)  # [B, W, V]
        logprobs = torch.log_softmax(logits, dim=-1)
        for row, (p, o) in enumerate(chunk):
            if not o:
                results.append((0.0, 0))
                continue
            positions = torch.arange(len(p) - 1, len(p) + len(o) - 1, device=device)  # [O]
            targets = ids[row, len(p) : len(p) + len(o)]  # [O]
            picked = logprobs[row, positions, targets]  # [O]
            results.append((float(picked.sum()), len(o)))
    return results
