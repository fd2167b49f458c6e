"""Devices: the devices a model spans and where its input ids go, CUDA synchronisation around timed
windows, peak memory, and torch's CPU thread count. Torch is imported inside the functions that
use it, so importing this module does not load it."""

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


def model_device(model):
    """Where input ids must go (the embedding's device, also under device_map="auto")."""
    return model.get_input_embeddings().weight.device


def output_device(model):
    return model.get_output_embeddings().weight.device


def sync(devices) -> None:
    """Wait for the kernels queued on a CUDA device, or on each of several (`devices`: a
    torch.device or an iterable of them), so that a wall-clock timing includes them; nothing to wait
    for elsewhere."""
    for device in (devices,) if hasattr(devices, "type") else devices:
        if device.type == "cuda":
            import torch  # only here: a CPU run never needs it for this

            torch.cuda.synchronize(device)


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


def set_threads(n: int | None) -> int:
    """torch's intra-op thread count set to `n` for the rest of the process (None or 0: left as it
    is); returns the count in force. The one place the package sets it: a long-lived process (a
    run's session, training, the distillation producer) calls it once, a timed block uses
    `torch_threads`."""
    import torch

    if n:
        torch.set_num_threads(int(n))
    return torch.get_num_threads()


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op thread count set to `n` for the block (None or 0: left as it is), restored
    after; yields the count in force inside."""
    import torch

    before = torch.get_num_threads()
    try:
        yield set_threads(n)
    finally:
        set_threads(before)
