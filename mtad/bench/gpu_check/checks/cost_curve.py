"""The cost-curve check: ms of one target forward of 1, 2, 3, 5, 9, 17, 33, 65 new tokens over a
256-token cache (`forward_ms`, on the uncompiled paths) on a random-weight Llama whose weights are
far larger than the cache (the memory-bound regime): 16 layers, 2048 wide, bf16 on a GPU, the same
shape scaled down on a CPU; its parameter bytes and the copy bandwidth (`copy_bandwidth`), hence the
floor of a decode step."""

from __future__ import annotations

import time

from ..context import Context
from ..engine import UNCOMPILED_PATHS
from ..markdown_cells import cell, table

# the cost curve: widths over a 256-token cache; "gpu": ~0.85 B parameters (1.7 GB in bf16) against
# a ~10 MB cache; "small": the same shape scaled down, for a CPU
CURVE_WIDTHS = (1, 2, 3, 5, 9, 17, 33, 65)
CURVE_CONTEXT = 256
CURVE_PATHS = UNCOMPILED_PATHS
CURVE_MODELS = {
    "gpu": {
        "config": dict(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
            tie_word_embeddings=False,
        ),
        "dtype": "bfloat16",
        "copy_mb": 1024,
    },
    "small": {
        "config": dict(
            hidden_size=256,
            intermediate_size=704,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=2048,
            max_position_embeddings=1024,
            tie_word_embeddings=False,
        ),
        "dtype": "float32",
        "copy_mb": 64,
    },
}


def plan(options, device_type: str) -> str:
    model = chosen_model(options, device_type)
    spec = CURVE_MODELS[model]
    c = spec["config"]
    return (
        f"forward_ms at widths {', '.join(map(str, CURVE_WIDTHS))} over a {CURVE_CONTEXT}-token cache, paths "
        f"{', '.join(CURVE_PATHS)}, on a random {spec['dtype']} Llama ({c['num_hidden_layers']} layers, hidden "
        f"{c['hidden_size']}, vocab {c['vocab_size']}); parameter bytes, copy_bandwidth, the floor of a step"
    )


def chosen_model(options, device_type: str) -> str:
    """The curve model asked for; else gpu on CUDA, small on a CPU."""
    return options.curve_model or ("gpu" if device_type == "cuda" else "small")


def curve_model(name: str, device):
    """The cost curve's random Llama, built on `device`, in its dtype, with its build time."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = CURVE_MODELS[name]
    dtype = getattr(torch, spec["dtype"])
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        dtype = torch.float16
    start = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**spec["config"]))
    model = model.to(dtype).eval().requires_grad_(False)
    return model, time.perf_counter() - start


def run(ctx: Context) -> dict:
    """The model, its bytes, the copy bandwidth and a row per width of ms per path."""
    import torch

    from mtad.bench.curves import copy_bandwidth, weight_bytes
    from mtad.generation import forward_ms
    from mtad.provenance import dtype_name

    name = chosen_model(ctx.options, ctx.device.type)
    model, build_s = curve_model(name, ctx.device)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * (CURVE_CONTEXT + max(CURVE_WIDTHS))
    kv_bytes *= model.dtype.itemsize
    param_bytes = weight_bytes(model)
    bandwidth = copy_bandwidth(ctx.device, megabytes=CURVE_MODELS[name]["copy_mb"])
    reps = 3 if ctx.quick else 10
    data = {
        "model": name,
        "config": CURVE_MODELS[name]["config"],
        "dtype": dtype_name(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameter_bytes": param_bytes,
        "kv_cache_bytes": kv_bytes,
        "build_s": round(build_s, 2),
        "context": CURVE_CONTEXT,
        "reps": reps,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "floor_ms": 1e3 * param_bytes / bandwidth,
        "paths": list(CURVE_PATHS),
        "note": "no compiled path: it would compile this model once per width's bucket",
        "rows": [],
    }
    for width in CURVE_WIDTHS:
        row = {"width": width}
        for path in CURVE_PATHS:
            if ctx.out_of_time():
                row[f"{path}_ms"] = None
                data["incomplete"] = "out of this check's time"
                continue
            row[f"{path}_ms"] = forward_ms(model, path, width, context=CURVE_CONTEXT, reps=reps)
        data["rows"].append(row)
    for path in CURVE_PATHS:
        base = data["rows"][0].get(f"{path}_ms")
        for row in data["rows"]:
            ms = row.get(f"{path}_ms")
            row[f"{path}_vs_width_1"] = ms / base if ms and base else None
    del model
    if ctx.device.type == "cuda":
        data["peak_memory_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**30
    return data


def section(data: dict) -> list[str]:
    """The report's Markdown of the check's data: the model, the bandwidth, a row per width."""
    c = data["config"]
    lines = [
        f"- model: random Llama, {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, intermediate "
        f"{c['intermediate_size']}, {c['num_attention_heads']}/{c['num_key_value_heads']} heads, "
        f"vocab {c['vocab_size']}, {data['dtype']}; {data['parameters'] / 1e6:.0f} M parameters, "
        f"{data['parameter_bytes'] / 2**20:.0f} MiB (the KV cache at {data['context']}+{max(CURVE_WIDTHS)} tokens: "
        f"{data['kv_cache_bytes'] / 2**20:.1f} MiB); built in {data['build_s']} s",
        f"- copy bandwidth: {data['copy_bandwidth_gb_s']:.1f} GB/s; floor of a step (parameter bytes / bandwidth): "
        f"{data['floor_ms']:.3f} ms",
        f"- median of {data['reps']} forwards over a {data['context']}-token cache (rolled back after each)"
        + (f"; peak memory {data['peak_memory_gib']:.2f} GiB" if data.get("peak_memory_gib") else "")
        + (f"; {data['note']}" if data.get("note") else ""),
        "",
    ]
    header = ["width"]
    for path in data["paths"]:
        header += [f"{path} ms", f"{path} / width 1"]
    header.append("static / floor")
    rows = []
    for r in data["rows"]:
        row = [r["width"]]
        for path in data["paths"]:
            row += [cell(r.get(f"{path}_ms"), ".3f"), cell(r.get(f"{path}_vs_width_1"), ".2f")]
        static = r.get("static_ms")
        row.append(cell(static / data["floor_ms"] if static else None, ".2f"))
        rows.append(row)
    return lines + table(header, rows)
