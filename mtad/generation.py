"""One generation as every measurement of the suite runs it: one builder, one seeding rule, one clock.

- `build_decoder`: a method's decoder on a pair's models, from its settings object or a dict of
  them. Outside the engine it is the only place a decoder is built: the runner's cells (and the
  experiments made of cells: the claims, the draft measurement), the bench, the block profile, the
  exactness enumeration and the GPU check all call it, so a method's settings reach the engine one way.
- `seeded`: the generator of sample `sample` of example `example_id` under run seed `seed`
  (`records.derive_seed`); every method draws the same stream on the same example and sample.
- `timed_generate`: one call, synchronised on every device the pair spans before and after; its
  `stats.seconds` are the whole call's (cache set-up included, as a reference implementation's
  `generate()` is timed), energy (when a meter is given) over the same window;
- `forward_ms`: one model forward timed alone, a `width`-token forward on a `context`-token KV cache
  on a decode path, rolled back after each repetition (the bench's cost curves, the dtype
  measurement, the draft measurement).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from mtad.decoding import DecodeOutput, Decoder, get_decoder
from mtad.decoding.capabilities import reads_target_features, target_feature_depths
from mtad.decoding.head_kv import draft_cached_model
from mtad.decoding.kv import CachedModel
from mtad.decoding.static_kv import cached_model
from mtad.devices import model_device, sync
from mtad.records import derive_seed


def build_decoder(
    method: str,
    target,
    draft=None,
    decode_path: str | None = None,
    settings: Any = None,
) -> Decoder:
    """`method`'s decoder; `settings`: its settings object (`DECODERS[method].params_type`) or a dict
    of its fields (None: its defaults). Unknown methods and settings are refused with the valid names."""
    path = {} if decode_path is None else {"decode_path": decode_path}
    if settings is None or isinstance(settings, dict):
        return get_decoder(method, target=target, draft=draft, **path, **(settings or {}))
    return get_decoder(method, target=target, draft=draft, **path, params=settings)


def seeded(seed: int, example_id: str | int = 0, sample: int = 0, device=None) -> torch.Generator:
    """The generator of one sample of one example: `derive_seed(seed, str(example_id), sample)`."""
    return torch.Generator(device=device or "cpu").manual_seed(derive_seed(seed, str(example_id), sample))


def timed_generate(
    decoder: Decoder,
    input_ids: torch.Tensor,  # [1, L]
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    devices=None,
    meter=None,
    **generate_kwargs: Any,
) -> tuple[DecodeOutput, dict | None]:
    """`decoder.generate` timed whole on `devices` (default: the target's); `generate_kwargs`:
    `eos_token_id`, `stop_rule`. Returns its output, `stats.seconds` set to the call's seconds, and
    the meter's reading (None without a meter)."""
    devices = devices if devices is not None else model_device(decoder.target)
    sync(devices)
    if meter is not None:
        meter.start()
    start = time.perf_counter()
    out = decoder.generate(input_ids, max_new_tokens=max_new_tokens, generator=generator, **generate_kwargs)
    sync(devices)
    out.stats.seconds = time.perf_counter() - start
    energy = meter.stop().as_dict() if meter is not None else None
    return out, energy


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
