"""What the teacher pass could reach on this machine, for each of its two kinds of work:

- scoring: a teacher-forced target forward over full batches (no padding), counted in positions/s;
- sampling: one decode step of a full slot batch over a cached context, counted in tokens/s
  (each row of the batch yields one token per step), the LM head over the whole vocabulary.
The producer's measured rates are printed beside these (`pipeline.produce`, `rates.jsonl`), so the
gap between what it does and what the hardware does is a number on every machine.
"""

from __future__ import annotations

import time

import torch

from ..provenance import dtype_name
from .sampler import cache_argument, slot_cache


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.no_grad()
def scoring_rate(target, batch: int = 8, length: int = 256, repeats: int = 3) -> float:
    """Positions/s of a teacher-forced forward (final hidden states) over [batch, length] tokens."""
    device = next(target.parameters()).device
    ids = torch.randint(0, target.config.vocab_size, (batch, length), device=device)
    return batch * length / _best_seconds(lambda: target.model(input_ids=ids, use_cache=False), repeats)


@torch.no_grad()
def sampling_rate(target, slots: int = 32, context: int = 256, repeats: int = 5) -> float:
    """Tokens/s of one decode step of `slots` rows after a `context`-token cached prefix."""
    device = next(target.parameters()).device
    cache = slot_cache(target, slots, context + repeats + 2)
    key = cache_argument(target)
    target(
        input_ids=torch.randint(0, target.config.vocab_size, (slots, context), device=device),
        use_cache=True,
        **{key: cache},
    )
    step = torch.randint(0, target.config.vocab_size, (slots, 1), device=device)

    def one_step():
        target(input_ids=step, use_cache=True, logits_to_keep=1, **{key: cache})
        for layer in cache.layers:  # the same context length every repeat
            layer.length -= 1

    return slots / _best_seconds(one_step, repeats)


def roofline(target, slots: int = 32) -> dict:
    """Both rates, with the settings they were taken at."""
    return {
        "scored_positions_per_s": scoring_rate(target),
        "scoring_shape": [8, 256],
        "sampled_tokens_per_s": sampling_rate(target, slots),
        "sampling_slots": slots,
        "sampling_context": 256,
        "dtype": dtype_name(target),
        "threads": torch.get_num_threads(),
    }
