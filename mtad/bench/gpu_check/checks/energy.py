"""The energy check: an NVML energy meter (`make_energy_meter("nvml", ...)`) around sps decodes of
tiny_llama for a few seconds: joules, watts, joules per token."""

from __future__ import annotations

import importlib.util
import time

from ..context import Context, Skipped
from ..markdown_cells import cell
from ..timed_decodes import generate, tiny_prompt


def plan(options, device_type: str) -> str:
    return "make_energy_meter('nvml', [device]) around sps decodes of tiny_llama for a few seconds: joules, watts"


def run(ctx: Context) -> dict:
    """The reading and what it covered; Skipped (with the decodes' data) when there is no reading."""
    from mtad.decoding.registry import VANILLA
    from mtad.devices import sync
    from mtad.metrics.energy_meters import make_energy_meter

    found = importlib.util.find_spec("pynvml") is not None
    target, draft = ctx.tiny_pairs()["tiny_llama"]
    # the fast path once the decode-path check has compiled it, else the static one (no compilation here)
    path = "fast" if ("tiny_llama", "fast", VANILLA) in ctx.warm_paths else "static"
    prompt = tiny_prompt()
    n_tokens = 16 if ctx.quick else 64
    window = 0.2 if ctx.device.type != "cuda" else (1.0 if ctx.quick else 3.0)
    generate(VANILLA, target, draft, path, prompt, n_tokens)  # warm-up
    meter, reason = make_energy_meter("nvml", [ctx.device])
    sync(ctx.device)
    meter.start()
    start, tokens, decodes = time.perf_counter(), 0, 0
    while time.perf_counter() - start < window or decodes == 0:
        tokens += len(generate(VANILLA, target, draft, path, prompt, n_tokens, seed=decodes).tokens)
        decodes += 1
    sync(ctx.device)
    reading = meter.stop()
    seconds = time.perf_counter() - start
    data = {
        "pynvml_importable": found,
        "path": path,
        "meter": reading.meter,
        "available": reading.joules is not None,
        "joules": reading.joules,
        "per_device": reading.per_device,
        "seconds": round(seconds, 3),
        "decodes": decodes,
        "tokens": tokens,
        "watts": reading.joules / seconds if reading.joules is not None else None,
        "joules_per_token": reading.joules / tokens if reading.joules is not None else None,
    }
    if reading.joules is None:
        why = reason or reading.reason
        if not found:
            why = f"pynvml (nvidia-ml-py) is not importable; {why}"
        raise Skipped(f"no energy reading: {why}", data)
    return data


def section(data: dict) -> list[str]:
    """The report's Markdown of the check's data: the meter, the window, the energy."""
    return [
        f"- meter: {data['meter']} (pynvml {'importable' if data['pynvml_importable'] else 'not importable'}); "
        f"available: {cell(data['available'])}",
        f"- window: {cell(data['seconds'], '.2f')} s, {data['decodes']} sps decodes on the {data['path']} path, "
        f"{data['tokens']} tokens",
        f"- energy: {cell(data['joules'], '.2f')} J, {cell(data['watts'], '.1f')} W, "
        f"{cell(data['joules_per_token'], '.3g')} J/token",
        "",
    ]
