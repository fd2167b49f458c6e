"""The wall time of one model forward: `forward_ms`, a `width`-token forward on a `context`-token
KV cache on a decode path (eager, or the static cache and lean forward), the cache rolled back after
each repetition; a feature head runs over its target's cache. Read by the benchmark's cost curves
and by the draft measurement."""

from __future__ import annotations

import statistics
import time

import torch

from mtad.decoding.capabilities import reads_target_features, target_feature_depths
from mtad.decoding.head_kv import draft_cached_model
from mtad.decoding.kv import CachedModel
from mtad.decoding.static_kv import cached_model
from mtad.devices import model_device, sync


@torch.inference_mode()
def forward_ms(model, path: str, width: int, context: int = 200, reps: int = 10, target=None) -> float:
    """Median wall time of one `width`-token forward on a `context`-token cache (rolled back after
    each). A feature head runs over `target`'s cache, which has scored every position it reads."""
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prefix, tokens = (
        torch.randint(0, vocab, (context,), generator=gen),
        torch.randint(0, vocab, (width,), generator=gen),
    )
    if reads_target_features(model):
        target_lm = cached_model(target, None, path, context + width + 16, features=target_feature_depths(model))
        target_lm.prefill(torch.cat([prefix, tokens]))
        lm = draft_cached_model(model, target_lm, None, path, context + 16)
    else:
        lm = cached_model(model, None, path, context + 16) if path != "eager" else CachedModel(model)
    lm.prefill(prefix)
    times = []
    for _ in range(reps + 2):
        start = time.perf_counter()
        lm.extend(tokens)
        sync(model_device(model))
        times.append(time.perf_counter() - start)
        lm.crop(context)
    return 1000 * statistics.median(times[2:])  # the first two warm caches and allocators
