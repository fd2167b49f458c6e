"""Devices: the devices a model spans, CUDA synchronisation around timed windows, and peak memory."""

from __future__ import annotations

import resource
from contextlib import contextmanager


def model_devices(*models) -> list:
    import torch

    devices = set()
    for model in models:
        if model is None:
            continue
        device_map = getattr(model, "hf_device_map", None)
        if device_map:
            devices.update(
                torch.device(d if not isinstance(d, int) else f"cuda:{d}")
                for d in device_map.values()
                if d not in ("disk",)
            )
        else:
            devices.update(p.device for p in model.parameters())
    return sorted(devices, key=str)


def output_device(model):
    return model.get_output_embeddings().weight.device


def sync(devices) -> None:
    from mtad.decoding.kv import sync as sync_device

    for device in devices:
        sync_device(device)


def reset_peak_memory(devices) -> None:
    import torch

    for device in devices:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)


def peak_memory(devices) -> dict:
    import torch

    cuda = [d for d in devices if d.type == "cuda"]
    if cuda:
        peak = sum(torch.cuda.max_memory_allocated(d) for d in cuda)
        return {"peak_memory_mb": peak / 2**20, "peak_memory_kind": "cuda max_memory_allocated, summed over GPUs"}
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"peak_memory_mb": rss_kb / 1024, "peak_memory_kind": "process peak RSS (CPU)"}


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op thread count set to `n` for the block (None or 0: left as it is), restored
    after: the one place a benchmark or a run sets it."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
