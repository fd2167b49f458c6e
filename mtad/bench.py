"""Speed of our decoders on their decode paths against the reference implementations.

Every method on the eager path (the model's own forward, DynamicCache) and the fast one
(static KV cache, lean forward; static_kv.py), beside Hugging Face's `generate()` (eager, and
with its static cache + torch.compile) and assisted generation: the same pair, prompts and
token budget, in one process, alternating runs, medians over repetitions. Compilation is
timed on the warm-up call and reported apart from tokens/s. Then the cost of verifying
1, 2, 3, 5, 9 tokens in one target forward per dtype and path, against the floor of a decode
step (weight bytes / measured copy bandwidth), the time of the same forwards' matrix products
alone (`linear_only_ms`: what a forward costs beyond its products), and the speed-ups those
costs predict; optionally llama.cpp on the same GGUF (`llama_cpp_reference`); the goals table.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mtad.decoding import (
    DecoderParams,
    MMTADParams,
    MTADParams,
    SamplingParams,
    SpecInferParams,
    SpecTrParams,
    SpSParams,
    get_decoder,
)
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.head_kv import draft_cached_model
from mtad.decoding.kv import CachedModel, model_device, sync
from mtad.decoding.layer_math import fused_weights
from mtad.decoding.static_kv import cached_model, resolve_decode_path
from mtad.metrics.speed import aggregate_speed
from mtad.models.pairs import QUANTIZED_DTYPES, auto_dtype, cpu_flags


@dataclass
class Config:
    """One row of the benchmark: an implementation of a method at given settings on one path."""

    label: str
    impl: str  # "ours" | "hf"
    method: str  # our decoder name; for hf: "sampling" (generate) or "sps" (assisted generation)
    params: DecoderParams  # the method's settings (for hf: those of `method`)
    path: str = "eager"  # ours: a decode_path; hf: "eager" | "static+compile"
    target_dtype: str | None = None  # another target than the pair's (a key of `targets`, e.g. "q4_1")


@dataclass
class Measure:
    tokens: int = 0
    seconds: float = 0.0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    target_calls: int = 0
    accepted: int = 0
    drafted: int = 0
    compiles: int = 0


PATHS = ("eager", "fast")


def method_params(gamma: int) -> dict[str, DecoderParams]:
    """Each method at its defaults with draft length γ; SpecTr with 2 drafts and SpecInfer with the
    tree (2, 2, 1, 1), lighter than their defaults."""
    return {
        "sampling": SamplingParams(),
        "sps": replace(SpSParams(), gamma=gamma),
        "spectr": replace(SpecTrParams(), gamma=gamma, num_drafts=2),
        "specinfer": replace(SpecInferParams(), k_config=(2, 2, 1, 1)),
        "mtad": replace(MTADParams(), gamma=gamma),
        "mmtad": replace(MMTADParams(), gamma=gamma),
    }


HF_REFERENCE_DTYPE = "float32"  # HF eager generate() on this target is the reference of goal (c)
DENSE_DTYPES = ("float32", "bfloat16", "float16", "float64")  # a study's default target is one of these


def default_configs(
    gamma: int,
    compiled: bool = False,
    assisted: bool = True,
    target_dtypes: tuple[str, ...] = (),
    pair_dtype: str = HF_REFERENCE_DTYPE,
) -> list[Config]:
    """Every method on both paths; HF generate eager and static+compile; assisted generation
    (`assisted`: a feature head is no model `generate()` can assist with); optionally our compiled
    path for sampling and sps (it does not win on a CPU, so `fast` is the static path there);
    sampling on the fast path with each target in `target_dtypes` (e.g. the q4_1 one); HF eager
    generate() on the float32 target too when the pair's target (`pair_dtype`) is another."""
    params = method_params(gamma)
    configs = [
        Config("HF generate", "hf", "sampling", params["sampling"], "eager"),
        Config("HF generate static+compile", "hf", "sampling", params["sampling"], "static+compile"),
    ]
    if pair_dtype != HF_REFERENCE_DTYPE:
        label = f"HF generate {HF_REFERENCE_DTYPE}"
        configs.append(Config(label, "hf", "sampling", params["sampling"], "eager", HF_REFERENCE_DTYPE))
    if assisted:
        configs.append(Config("HF assisted", "hf", "sps", params["sps"], "eager"))
    for method, p in params.items():
        configs += [Config(f"{method} {path}", "ours", method, p, path) for path in PATHS]
        if compiled and method in ("sampling", "sps"):
            configs.append(Config(f"{method} compiled", "ours", method, p, "compiled"))
    for dtype in target_dtypes:
        configs.append(Config(f"sampling fast {dtype}", "ours", "sampling", params["sampling"], "fast", dtype))
    return configs


def run_ours(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> Measure:
    decoder = get_decoder(config.method, target=target, draft=draft, decode_path=config.path, params=config.params)
    sync(model_device(target))
    start = time.perf_counter()
    out = decoder.generate(prompt, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))
    sync(model_device(target))
    s = out.stats
    return Measure(
        len(out.tokens),
        time.perf_counter() - start,
        s.target_seconds,
        s.draft_seconds,
        s.target_calls,
        s.accepted,
        s.drafted,
        s.compiles,
    )


def run_hf(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> Measure:
    """`generate()` with the same processing; for sps, assisted generation with a constant γ;
    "static+compile": HF's static cache with its own torch.compile of the decode step."""
    from transformers import CompileConfig

    p = config.params
    kwargs = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": max_new_tokens,  # same length as ours (no EOS stop)
        "do_sample": p.temperature > 0,
        "pad_token_id": target.config.eos_token_id,
    }
    if kwargs["do_sample"]:
        kwargs.update(temperature=p.temperature, top_k=p.top_k or None, top_p=p.top_p)
    if config.path == "static+compile":
        compile_config = CompileConfig(dynamic=False)
        compile_config._compile_all_devices = True  # HF compiles on CUDA only unless told
        kwargs.update(cache_implementation="static", compile_config=compile_config)
    if config.method == "sps":
        kwargs.update(assistant_model=draft)
        draft.generation_config.num_assistant_tokens = p.gamma
        draft.generation_config.num_assistant_tokens_schedule = "constant"  # fixed γ, not the dynamic schedule
        draft.generation_config.assistant_confidence_threshold = 0.0  # never stop drafting early
    torch.manual_seed(seed)
    sync(model_device(target))
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(
            prompt.to(target.device), attention_mask=torch.ones_like(prompt).to(target.device), **kwargs
        )
    sync(model_device(target))
    return Measure(out.shape[1] - prompt.shape[1], time.perf_counter() - start)


def run(config: Config, target, *args, targets: dict | None = None, **kwargs) -> Measure:
    """`config` on the pair's `target`, or on `targets[config.target_dtype]` when it names another."""
    if config.target_dtype:
        target = (targets or {})[config.target_dtype]
    return (run_ours if config.impl == "ours" else run_hf)(config, target, *args, **kwargs)


def warm_up(
    configs: list[Config],
    target,
    draft,
    prompts: list[torch.Tensor],
    tokens: int,
    max_new_tokens: int,
    log=print,
    targets: dict | None = None,
) -> dict[str, dict]:
    """Runs before timing (lazy initialisation, compilation); their wall time and the compilations they
    triggered are kept: compile time = first call - a second identical call. Compiled configs warm up
    on every prompt at the timed length (HF's static cache is sized prompt + new tokens, a shape).
    `targets`: the other targets configs name (`Config.target_dtype`)."""
    out = {}
    for config in configs:
        compiled = "compile" in config.path
        runs = [(p, max_new_tokens) for p in prompts] if compiled else [(prompts[0], tokens)]
        first = [run(config, target, draft, p, n, seed=0, targets=targets) for p, n in runs]
        second = run(config, target, draft, *runs[0], seed=0, targets=targets)
        out[config.label] = {
            "first_call_s": first[0].seconds,
            "second_call_s": second.seconds,
            "compile_s": max(sum(m.seconds for m in first) - len(first) * second.seconds, 0.0),
            "compiles": sum(m.compiles for m in first),
            "compiles_on_second_call": second.compiles,
        }
        log(f"warm-up {config.label:28s} first {first[0].seconds:6.1f} s, then {second.seconds:5.1f} s")
    return out


def measure_all(
    configs: list[Config],
    target,
    draft,
    prompts: list[torch.Tensor],
    max_new_tokens: int,
    reps: int,
    log=print,
    targets: dict | None = None,
) -> dict[str, list[Measure]]:
    """Alternate configs within each repetition (drift hits all alike); one Measure per rep."""
    results: dict[str, list[Measure]] = {c.label: [] for c in configs}
    for rep in range(reps):
        for config in configs:
            total = Measure()
            for i, prompt in enumerate(prompts):
                m = run(config, target, draft, prompt, max_new_tokens, seed=1000 * rep + i, targets=targets)
                for key in vars(total):
                    setattr(total, key, getattr(total, key) + getattr(m, key))
            results[config.label].append(total)
            log(f"rep {rep} {config.label:28s} {total.tokens / total.seconds:7.2f} tok/s")
    return results


def summarise(configs: list[Config], results: dict[str, list[Measure]]) -> list[dict]:
    rows = []
    for c in configs:
        ms = results[c.label]
        tps = statistics.median(m.tokens / m.seconds for m in ms)
        row = {
            "label": c.label,
            "impl": c.impl,
            "method": c.method,
            "path": c.path,
            "target_dtype": c.target_dtype,
            "params": asdict(c.params),
            "tokens_per_s": tps,
            "tokens_per_s_reps": [m.tokens / m.seconds for m in ms],
            "compiles_while_timed": sum(m.compiles for m in ms),
        }
        if c.impl == "ours":
            m = sorted(ms, key=lambda m: m.tokens / m.seconds)[len(ms) // 2]
            speed = aggregate_speed(
                [
                    {
                        "new_tokens": m.tokens,
                        "seconds": m.seconds,
                        "target_calls": m.target_calls,
                        "accepted": m.accepted,
                        "drafted": m.drafted,
                    }
                ]
            )  # the runner's totals
            row.update(
                target_frac=m.target_seconds / m.seconds,
                draft_frac=m.draft_seconds / m.seconds,
                other_frac=1 - (m.target_seconds + m.draft_seconds) / m.seconds,
                block_efficiency=speed["block_efficiency"],
                acceptance_rate=speed["acceptance_rate"],
                ms_per_token=1000 * m.seconds / m.tokens,
            )
        rows.append(row)
    by_label = {r["label"]: r for r in rows}
    for r in rows:
        if r["impl"] != "ours":
            continue
        eager = None if r.get("target_dtype") else by_label.get(f"{r['method']} eager")
        base = by_label.get(f"sampling {r['path']}")
        if eager:
            r["vs_eager"] = r["tokens_per_s"] / eager["tokens_per_s"]
        if base:
            r["speedup_vs_sampling"] = r["tokens_per_s"] / base["tokens_per_s"]
        ref = {
            "sampling": ["HF generate", "HF generate static+compile", f"HF generate {HF_REFERENCE_DTYPE}"],
            "sps": ["HF assisted"],
        }.get(r["method"], [])
        r["vs_hf"] = {name: r["tokens_per_s"] / by_label[name]["tokens_per_s"] for name in ref if name in by_label}
    return rows


# ------------------------------------------------------------------ forward costs and the floor


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
        target_lm = cached_model(target, None, path, context + width + 16, features=True)
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


def weight_bytes(model) -> int:
    """Bytes a step reads: parameters and buffers (a feature head's LM-head rows are a buffer)."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def copy_bandwidth(device: torch.device, megabytes: int = 256, reps: int = 5) -> float:
    """Bytes/s moved by a large tensor copy (read + write), the best of `reps`."""
    src = torch.ones(megabytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * 4 / best


# ------------------------------------------------------------------ matrix products alone

PRODUCT_WIDTHS = (1, 5, 9)  # widths at which a forward is set beside its matrix products


def dtype_name(model) -> str:
    """A model's dtype as the pairs name it: "q4_1" for a quantized target, else e.g. "float32"."""
    return getattr(model, "mtad_dtype", None) or str(model.dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Product:
    """One matrix product of a forward: `run(x)` on x [rows, in_features]. `weight` [N, K] is the
    dense matrix a plain product multiplies by (None: a quantized module's own kernel)."""

    name: str
    in_features: int
    run: Callable[[torch.Tensor], torch.Tensor]
    weight: torch.Tensor | None = None


def _module(name: str, module: nn.Module) -> Product:
    """A module's own forward (nn.Linear, Q4_1Linear, Int8Linear), as the model calls it."""
    return Product(name, module.in_features, module, module.weight if type(module) is nn.Linear else None)


def _fused(name: str, weight: torch.Tensor) -> Product:
    """F.linear on a fused weight [N, K], as layer_math runs q|k|v and gate|up."""
    return Product(name, weight.shape[1], lambda x: F.linear(x, weight), weight)


@torch.no_grad()
def matrix_products(model, path: str = "fast") -> list[Product]:
    """The matrix products one forward of a Llama-family `model` runs on `path`, in order: per layer
    q, k, v, o, gate, up, down (the fast path: q|k|v and gate|up as one product each wherever
    `fused_weights` applies), then the LM head (on the rows the forward scores)."""
    lean = resolve_decode_path(path, model) != "eager"
    products = []
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        fused = fused_weights(layer) if lean else None  # builds them as the fast path's first forward would
        if fused is None:
            products += [
                _module(f"{i}.{n}", m) for n, m in (("q", attn.q_proj), ("k", attn.k_proj), ("v", attn.v_proj))
            ]
            products.append(_module(f"{i}.o", attn.o_proj))
            products += [_module(f"{i}.{n}", m) for n, m in (("gate", mlp.gate_proj), ("up", mlp.up_proj))]
        else:
            products += [
                _fused(f"{i}.qkv", fused.qkv),
                _module(f"{i}.o", attn.o_proj),
                _fused(f"{i}.gate_up", fused.gate_up),
            ]
        products.append(_module(f"{i}.down", mlp.down_proj))
    return products + [_module("lm_head", model.lm_head)]


def int8_products(products: list[Product]) -> list[Product]:
    """Each dense product requantized to int8 codes with one scale per row (max |w| / 127, round to
    nearest) and run by `aten._weight_int8pack_mm` on float32 inputs: a kernel family measured
    beside the others, not a target dtype. Quantized products are left out."""
    out = []
    for p in products:
        if p.weight is None:
            continue
        w = p.weight.detach().float()  # [N, K]
        scales = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127  # [N]
        codes = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()  # [N, K]

        def run(x, codes=codes, scales=scales):
            return torch.ops.aten._weight_int8pack_mm(x, codes, scales)  # [M, K] -> [M, N]

        out.append(Product(f"{p.name} int8", p.in_features, run))
    return out


@torch.inference_mode()
def products_ms(products: list[Product], width: int, dtype: torch.dtype, device: torch.device, reps: int = 10) -> float:
    """Median wall time (ms) of running every product once, back to back, each on its own random
    input [width, in_features] of `dtype`; two warm-up rounds first."""
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(width, p.in_features, generator=gen).to(device, dtype) for p in products]
    times = []
    for _ in range(reps + 2):
        start = time.perf_counter()
        for p, x in zip(products, inputs):
            p.run(x)
        sync(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[2:])


def linear_only_ms(model, width: int, reps: int = 10, path: str = "fast") -> float:
    """The matrix products alone of one `width`-token forward of `model` on `path`
    (`matrix_products`), in ms: the part of `forward_ms` that is neither attention nor the
    elementwise work between products."""
    return products_ms(matrix_products(model, path), width, model.dtype, model_device(model), reps)


def curve_model(dtype: str, models: list):
    """A model of `dtype` from `models` (the first whose dtype it is, else a copy of the first dense
    one cast to it); a quantized dtype cannot be cast to and must be among them."""
    for model in models:
        if dtype_name(model) == dtype:
            return model
    dense = next((m for m in models if not hasattr(m, "mtad_dtype")), None)
    if dense is None or dtype not in ("float32", "float64", "bfloat16", "float16"):
        raise ValueError(f"curve dtype {dtype!r}: no such target given (pass it in `targets`)")
    return copy.deepcopy(dense).to(getattr(torch, dtype))


def verification_curve(
    target,
    draft,
    dtypes: tuple[str, ...] = ("float32", "bfloat16", *QUANTIZED_DTYPES),
    threads: tuple[int, ...] = (1, 2),
    widths: tuple[int, ...] = (1, 2, 3, 5, 9),
    context: int = 200,
    reps: int = 10,
    log=print,
    targets: tuple = (),
) -> dict:
    """ms per target forward of each width, per dtype: on the eager path at the current thread
        count, on the fast path at each count in `threads` (the calibration of dtype and threads);
        beside it, at widths 1, 5, 9, its matrix products alone (`linear_ms`); the draft's 1-token
        step per dense dtype and thread count; the bandwidth floor of a 1-token step; the products of
        the float32 fast path requantized to per-row int8 (`int8_products`, a third of the repetitions
    at least 2). `targets`: targets in
        dtypes a cast cannot make (q4_1), used for those dtypes."""
    bandwidth = copy_bandwidth(model_device(target))
    current = torch.get_num_threads()
    curves, int8 = [], []
    product_widths = tuple(w for w in PRODUCT_WIDTHS if w in widths)

    def floor(model) -> float:
        return 1000 * weight_bytes(model) / bandwidth

    try:
        for dtype in dtypes:
            model = curve_model(dtype, [target, *targets])
            small = None if hasattr(model, "mtad_dtype") else curve_model(dtype, [draft])  # drafts stay dense
            for path, counts in (("eager", (current,)), ("fast", threads)):
                products = matrix_products(model, path)
                as_int8 = int8_products(products) if dtype == "float32" and path == "fast" else []
                for n_threads in counts:
                    torch.set_num_threads(n_threads)
                    row = {"model": "target", "dtype": dtype, "path": path, "threads": n_threads}
                    ms = {w: forward_ms(model, path, w, context, reps) for w in widths}
                    linear = _products_curve(products, product_widths, model.dtype, model_device(model), reps)
                    curves.append({**row, "ms": ms, "linear_ms": linear, "floor_ms": floor(model)})
                    log(f"curve {dtype} {path} {n_threads} threads: target {_ms(ms)} (floor {floor(model):.1f} ms)")
                    log(f"curve {dtype} {path} {n_threads} threads: its products alone {_ms(linear)}")
                    if as_int8:  # slow at several rows (about 1 s at 9 on 2 cores): fewer repetitions
                        device = model_device(model)
                        int8_ms = _products_curve(as_int8, product_widths, torch.float32, device, max(2, reps // 3))
                        int8.append({"path": path, "threads": n_threads, "linear_ms": int8_ms})
                        log(f"curve int8 per-row products {n_threads} threads: {_ms(int8_ms)}")
                    if small is not None:
                        draft_ms = {w: forward_ms(small, path, w, context, reps, target=model) for w in (1, 4)}
                        curves.append({**row, "model": "draft", "ms": draft_ms, "floor_ms": floor(small)})
                        log(f"curve {dtype} {path} {n_threads} threads: draft {_ms(draft_ms)}")
    finally:
        torch.set_num_threads(current)
    return {"context": context, "copy_bandwidth_gb_s": bandwidth / 1e9, "curves": curves, "int8_products": int8}


def _products_curve(products: list[Product], widths, dtype, device, reps: int) -> dict[int, float]:
    return {w: products_ms(products, w, dtype, device, reps) for w in widths}


def _ms(by_width: dict) -> str:
    return ", ".join(f"{w}: {v:.1f}" for w, v in by_width.items()) + " ms"


def calibration(curve: dict, gamma: int) -> dict:
    """Per model, the (dtype, threads) of the fast path with the cheapest 1-token step and, for
    the target, the cheapest (γ+1)-token verification (what speculative methods pay), among the
    dense dtypes: the candidates for a study's default target (the published weights, or their
    bf16 rounding). Where a 4-bit target is cheaper still, it is named under `fastest` (a
    different target: the fastest way to decode, not a default)."""
    fast = [c for c in curve["curves"] if c["path"] == "fast"]

    def pick(model: str, width: int, dtypes=None) -> dict | None:
        rows = [
            c for c in fast if c["model"] == model and width in c["ms"] and (dtypes is None or c["dtype"] in dtypes)
        ]
        best = min(rows, key=lambda c: c["ms"][width], default=None)
        return best and {"dtype": best["dtype"], "threads": best["threads"], "ms": best["ms"][width], "width": width}

    out = {}
    for key, model, width in (
        ("target_step", "target", 1),
        ("target_verify", "target", gamma + 1),
        ("draft_step", "draft", 1),
    ):
        dense, best = pick(model, width, DENSE_DTYPES), pick(model, width)
        out[key] = dense or best
        if dense and best["ms"] < dense["ms"]:
            out[key] = {**dense, "fastest": best}
    return out


def predicted_sps_speedup(alpha: float, gamma: int, draft_ms: float, step_ms: float, verify_ms: float) -> float:
    """Expected SpS tokens/s over sampling at per-token acceptance α (Leviathan et al.): block
    efficiency (1 - α^(γ+1)) / (1 - α) per iteration of γ draft steps and one (γ+1)-token verification."""
    block = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return block * step_ms / (gamma * draft_ms + verify_ms)


def environment(target, draft) -> dict:
    from mtad.runner.provenance import environment_record

    flags = cpu_flags()
    env = environment_record(models=(target, draft))  # the runner's record: machine, versions, code state
    return {
        **env,
        "threads": env["torch_threads"],
        "torch": env["versions"]["torch"],
        "transformers": env["versions"]["transformers"],
        "target_dtype": getattr(target, "mtad_dtype", None) or str(target.dtype),  # q4_1 names its format
        "draft_dtype": str(draft.dtype),
        "device": str(next(target.parameters()).device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "amx": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "auto_dtype": auto_dtype(next(target.parameters()).device),  # what a pair's `auto` dtype means here
        "cuda": env["gpus"][0] if env["gpus"] else None,
    }


# ------------------------------------------------------------------ llama.cpp on the same GGUF (optional)

LLAMA_CPP_MISSING = "llama-cpp-python not installed; `pip install llama-cpp-python` builds it from source, ~10 min"


def llama_cpp_reference(
    gguf_path,
    threads: int,
    prompts: list[list[int]],
    max_new_tokens: int,
    reps: int = 3,
    widths: tuple[int, ...] = PRODUCT_WIDTHS,
    context: int = 200,
    sampling: SamplingParams | None = None,
) -> dict | None:
    """llama.cpp (llama-cpp-python) on `gguf_path` at `threads` threads: tokens/s of greedy and of
    sampled generation (`sampling`'s temperature, top-k, top-p; no other sampler, EOS not stopping)
    of `max_new_tokens` per prompt, prefill included, median over `reps` after a warm-up; and ms of
    a `width`-token eval on a `context`-token cache, logits of every row (median). None when
    llama_cpp is not importable; {"error": ...} when it fails."""
    try:
        import llama_cpp
    except ImportError:
        return None
    sampling = sampling or SamplingParams()
    n_ctx = max(max(map(len, prompts)) + max_new_tokens, context + max(widths)) + 16
    try:
        llm = llama_cpp.Llama(str(gguf_path), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, verbose=False)
        out = {"threads": threads, "version": getattr(llama_cpp, "__version__", None)}
        for name, temperature in (("greedy", 0.0), ("sampled", sampling.temperature)):
            rates = [_llama_cpp_rate(llm, prompts, max_new_tokens, temperature, sampling) for _ in range(reps + 1)]
            out[f"{name}_tokens_per_s"] = statistics.median(rates[1:])  # the first warms up
        del llm
        scorer = llama_cpp.Llama(
            str(gguf_path), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, logits_all=True, verbose=False
        )
        out["eval_ms"] = {w: _llama_cpp_eval_ms(scorer, w, context, reps) for w in widths}
        return out
    except Exception as exc:  # a reference only: an API it does not know must not end the benchmark
        return {"error": f"{type(exc).__name__}: {exc}"}


def _llama_cpp_rate(llm, prompts: list[list[int]], max_new_tokens: int, temperature: float, sampling) -> float:
    """New tokens/s over the prompts, each generated from an empty cache (`reset`)."""
    seconds = 0.0
    for prompt in prompts:
        llm.reset()
        start = time.perf_counter()
        stream = llm.generate(
            prompt, top_k=sampling.top_k, top_p=sampling.top_p, min_p=0.0, temp=temperature, repeat_penalty=1.0
        )
        for n, _ in enumerate(stream, start=1):
            if n == max_new_tokens:
                break
        seconds += time.perf_counter() - start
    return len(prompts) * max_new_tokens / seconds


def _llama_cpp_eval_ms(llm, width: int, context: int, reps: int) -> float:
    """Median ms of evaluating `width` random tokens after `context` cached ones (the cache rolled
    back by `n_tokens` after each: eval drops the cache from there on)."""
    gen = torch.Generator().manual_seed(0)
    prefix, tokens = (torch.randint(0, llm.n_vocab(), (n,), generator=gen).tolist() for n in (context, width))
    llm.reset()
    llm.eval(prefix)
    times = []
    for _ in range(reps + 2):
        llm.n_tokens = context
        start = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[2:])


# ------------------------------------------------------------------ goals

OVERHEAD_GOAL = 1.25  # whole forward / its matrix products, at 1 and 5 tokens (fast path, each dtype)
FIVE_OVER_ONE_GOAL = 1.3  # 5-token / 1-token matrix products (the pair's target dtype)
VS_HF_GOAL = 1.6  # our sampling (fast) / HF eager generate(), tokens/s
VS_LLAMA_CPP_GOAL = 1.0  # our sampling with the q4_1 target / llama.cpp sampling on the same GGUF
COMPILE_GOAL_S = 60.0  # first use of the compiled path, where it is the default


def _by_width(ms: dict) -> dict[int, float]:
    return {int(k): v for k, v in ms.items()}  # JSON keys are strings


def fast_target_curves(payload: dict) -> dict[str, dict]:
    """dtype -> the curve's fast-path target row with products measured, at the run's thread count
    (else at the most threads measured)."""
    curve = payload.get("curve") or {}
    threads = payload["environment"]["threads"]
    rows = [c for c in curve.get("curves", []) if c["model"] == "target" and c["path"] == "fast" and c.get("linear_ms")]
    return {c["dtype"]: c for c in sorted(rows, key=lambda c: (c["threads"] == threads, c["threads"]))}


def default_dtype(payload: dict) -> str:
    return payload["environment"]["target_dtype"].removeprefix("torch.")


def _goal(key: str, goal: str, measured: str, met: bool | None) -> dict:
    return {"key": key, "goal": goal, "measured": measured, "met": met}


def _overhead_goals(payload: dict) -> list[dict]:
    """(a) per dtype: whole forward ≤ 1.25x its matrix products at 1 and 5 tokens (fast path)."""
    out = []
    for dtype, c in fast_target_curves(payload).items():
        ms, linear = _by_width(c["ms"]), _by_width(c["linear_ms"])
        ratios = {w: ms[w] / linear[w] for w in (1, 5) if w in ms and w in linear}
        text = ", ".join(f"{w} tok {r:.2f}x" for w, r in ratios.items()) + f" ({c['threads']} threads)"
        met = all(r <= OVERHEAD_GOAL for r in ratios.values()) if len(ratios) == 2 else None
        goal = f"{dtype}: whole forward ≤ {OVERHEAD_GOAL}x its matrix products at 1 and 5 tokens (fast path)"
        out.append(_goal("a", goal, text if ratios else "not measured", met))
    return out or [_goal("a", f"whole forward ≤ {OVERHEAD_GOAL}x its matrix products", "not measured (no curve)", None)]


def _five_over_one_goal(payload: dict) -> dict:
    """(b) the default dtype's 5-token matrix products ≤ 1.3x its 1-token ones."""
    dtype = default_dtype(payload)
    goal = f"{dtype} (the pair's target): 5-token matrix products ≤ {FIVE_OVER_ONE_GOAL}x the 1-token ones"
    c = fast_target_curves(payload).get(dtype)
    linear = _by_width(c["linear_ms"]) if c else {}
    if not {1, 5} <= set(linear):
        return _goal("b", goal, "not measured", None)
    ratio = linear[5] / linear[1]
    return _goal("b", goal, f"{ratio:.2f}x ({linear[5]:.2f} / {linear[1]:.2f} ms)", ratio <= FIVE_OVER_ONE_GOAL)


def _tokens_per_s(payload: dict, label: str) -> float | None:
    row = next((r for r in payload.get("rows", []) if r["label"] == label), None)
    return row["tokens_per_s"] if row else None


def q4_sampling_label(payload: dict, dtype: str = "q4_1") -> str:
    """The row of sampling with the 4-bit target `dtype`: its own row, or the pair's when its target is it."""
    return "sampling fast" if default_dtype(payload) == dtype else f"sampling fast {dtype}"


def _vs_hf_goal(payload: dict) -> dict:
    """(c) sampling on the default pair ≥ 1.6x HF eager generate() on the float32 target, tokens/s."""
    ours = _tokens_per_s(payload, "sampling fast")
    hf = _tokens_per_s(payload, f"HF generate {HF_REFERENCE_DTYPE}") or (
        _tokens_per_s(payload, "HF generate") if default_dtype(payload) == HF_REFERENCE_DTYPE else None
    )
    goal = (
        f"sampling (fast path, target {default_dtype(payload)}) ≥ {VS_HF_GOAL}x HF eager generate() "
        f"on the {HF_REFERENCE_DTYPE} target, tokens/s"
    )
    if not (ours and hf):
        return _goal("c", goal, "not measured", None)
    return _goal("c", goal, f"{ours / hf:.2f}x ({ours:.1f} / {hf:.1f} tok/s)", ours / hf >= VS_HF_GOAL)


def llama_cpp_unmeasured(llama: dict | None) -> str | None:
    """Why llama.cpp was not measured (None: it was)."""
    if llama is None:
        return LLAMA_CPP_MISSING
    if "error" in llama:
        return f"error: {llama['error']}"
    return llama.get("skipped")


def _vs_llama_cpp_goals(payload: dict) -> list[dict]:
    """(d) per 4-bit target (q4_1, q4_1_bf16): sampling ≥ 1.0x llama.cpp sampling on the same GGUF."""
    out = []
    for dtype in QUANTIZED_DTYPES:
        goal = f"sampling with the {dtype} target ≥ {VS_LLAMA_CPP_GOAL}x llama.cpp on the same GGUF, tokens/s"
        llama, ours = payload.get("llama_cpp"), _tokens_per_s(payload, q4_sampling_label(payload, dtype))
        why = llama_cpp_unmeasured(llama)
        if why or not ours:
            out.append(_goal("d", goal, f"not measurable ({why or f'no {dtype} sampling row'})", None))
            continue
        ref = llama["sampled_tokens_per_s"]
        out.append(
            _goal("d", goal, f"{ours / ref:.2f}x ({ours:.1f} / {ref:.1f} tok/s)", ours / ref >= VS_LLAMA_CPP_GOAL)
        )
    return out


def _compile_goal(payload: dict) -> dict:
    """(e) first use of the compiled path ≤ 60 s where it is the default path."""
    path = payload["setup"].get("default_path")
    goal = f"compilation, where it is the default, ≤ {COMPILE_GOAL_S:.0f} s first use"
    if path != "compiled":
        return _goal("e", goal, f"not the default (the default path here is {path or 'not recorded'})", None)
    warm = payload.get("warm_up", {}).get("sampling compiled")
    if not warm:
        return _goal("e", goal, "not measured (run with --compiled)", None)
    first = warm["first_call_s"]
    return _goal("e", goal, f"{first:.1f} s (of which compile {warm['compile_s']:.1f} s)", first <= COMPILE_GOAL_S)


def goals(payload: dict) -> list[dict]:
    """Each goal with its measured value and met (True / False; None: not measurable or not applicable)."""
    return [
        *_overhead_goals(payload),
        _five_over_one_goal(payload),
        _vs_hf_goal(payload),
        *_vs_llama_cpp_goals(payload),
        _compile_goal(payload),
    ]


# ------------------------------------------------------------------ report


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "" if value is None else pattern.format(value)


def _products_lines(curve: dict) -> list[str]:
    """The table of whole forwards beside their matrix products, per dtype, path and threads."""
    rows = [c for c in curve["curves"] if c["model"] == "target" and c.get("linear_ms")]
    if not rows:
        return []
    widths = sorted({int(w) for c in rows for w in c["linear_ms"]})
    head = " | ".join(f"fwd {w} | mm {w} | fwd/mm {w}" for w in widths)
    lines = [
        "",
        "Whole forward vs its matrix products (ms, median): a forward of n new tokens on the cache above, beside "
        "its matrix products alone, back to back on inputs [n, in_features] through the same modules and kernels "
        "(fast: q|k|v and gate|up fused for dense weights; q4_1: the int4 kernel, its head the int8 one; "
        "the LM head on n rows). fwd/mm is what a forward costs beyond its products. int8 per row: the float32 "
        "fast path's products requantized to one int8 scale per row in `_weight_int8pack_mm` (a kernel "
        "measured, not a target dtype).",
        "",
        f"| dtype | path | threads | {head} | mm 5 / mm 1 | mm 9 / mm 1 |",
        "|---|---|---:|" + "---:|" * (3 * len(widths) + 2),
    ]
    int8 = [{**c, "dtype": "int8 per row", "ms": {}} for c in curve.get("int8_products", [])]
    for c in [*rows, *int8]:
        ms, linear = _by_width(c["ms"]), _by_width(c["linear_ms"])
        cells = " | ".join(
            f"{_fmt(ms.get(w), '{:.1f}')} | {_fmt(linear.get(w), '{:.2f}')} | "
            f"{_fmt(ms[w] / linear[w] if w in ms and w in linear else None)}"
            for w in widths
        )
        growth = [_fmt(linear[w] / linear[1] if w in linear and 1 in linear else None) for w in (5, 9)]
        lines.append(f"| {c['dtype']} | {c['path']} | {c['threads']} | {cells} | {growth[0]} | {growth[1]} |")
    return lines


def _llama_cpp_line(payload: dict) -> str:
    llama = payload.get("llama_cpp")
    why = llama_cpp_unmeasured(llama)
    if why:
        return f"llama.cpp: not measured ({why})."
    evals = ", ".join(f"{w}: {v:.1f}" for w, v in _by_width(llama["eval_ms"]).items())
    return (
        f"llama.cpp {llama.get('version') or ''} on the same GGUF, {llama['threads']} threads: greedy "
        f"{llama['greedy_tokens_per_s']:.2f} tok/s, sampled {llama['sampled_tokens_per_s']:.2f} tok/s; "
        f"eval of n tokens on a {(payload.get('curve') or {}).get('context', 200)}-token cache (every row's logits): "
        f"{evals} ms."
    )


def _sampling_lines(payload: dict) -> list[str]:
    """Sampling per target beside HF eager generate() and llama.cpp (tokens/s)."""
    hf = _tokens_per_s(payload, "HF generate")
    runs = [
        ("sampling fast", f"ours, fast path, target {default_dtype(payload)}"),
        *(
            (r["label"], f"ours, fast path, target {r['target_dtype']}")
            for r in payload["rows"]
            if r.get("target_dtype") and r["impl"] == "ours"
        ),
        ("HF generate", f"HF eager generate(), target {default_dtype(payload)}"),
        *(
            (r["label"], f"HF eager generate(), target {r['target_dtype']}")
            for r in payload["rows"]
            if r.get("target_dtype") and r["impl"] == "hf"
        ),
    ]
    lines = ["", "Sampling by target (tokens/s, same prompts and budget):", "", "| run | tok/s | / HF generate |"]
    lines.append("|---|---:|---:|")
    for label, text in runs:
        tps = _tokens_per_s(payload, label)
        if tps:
            lines.append(f"| {text} | {tps:.2f} | {_fmt(hf and tps / hf)} |")
    llama = payload.get("llama_cpp")
    if not llama_cpp_unmeasured(llama):
        for kind in ("sampled", "greedy"):
            tps = llama[f"{kind}_tokens_per_s"]
            lines.append(
                f"| llama.cpp {kind}, q4_1 GGUF, {llama['threads']} threads | {tps:.2f} | {_fmt(hf and tps / hf)} |"
            )
    return [*lines, "", _llama_cpp_line(payload)]


def _calibration_line(cal: dict, auto: str | None) -> str:
    def one(v: dict) -> str:
        return f"{v['dtype']}, {v['threads']} threads, {v['ms']:.1f} ms"

    picks = "; ".join(
        f"{k.replace('_', ' ')} ({v['width']} tok): {one(v)}"
        + (f" ({one(v['fastest'])} is faster still, a different target)" if v.get("fastest") else "")
        for k, v in cal.items()
    )
    line = f"Calibration (fast path, cheapest per model and work among the dense dtypes): {picks}."
    if auto:
        dense = {v["dtype"] for v in cal.values()}
        verdict = "agrees" if dense == {auto} else "differs: set the pair's dtypes explicitly to follow it"
        line += f" A pair's `auto` dtype is {auto} on this machine; the calibration {verdict}."
    return line


def _goals_lines(payload: dict) -> list[str]:
    marks = {True: "met", False: "not met", None: "n/a"}
    lines = ["", "## Goals", "", "| | goal | measured | met |", "|---|---|---|---|"]
    lines += [f"| ({g['key']}) | {g['goal']} | {g['measured']} | {marks[g['met']]} |" for g in goals(payload)]
    if payload.get("calibration"):
        lines += ["", _calibration_line(payload["calibration"], payload["environment"].get("auto_dtype"))]
    return lines


def write_report(out_dir: Path, payload: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(payload, indent=2))
    env, setup = payload["environment"], payload["setup"]
    sampling = SamplingParams()
    rows = {r["label"]: r for r in payload["rows"]}
    lines = [
        "# Speed: decode paths and the Hugging Face references",
        "",
        f"Pair `{setup['pair']}`, {setup['prompts']} held-out prompts x {setup['max_new_tokens']} new tokens, "
        f"{setup['reps']} alternating repetitions (median), sampled (T {sampling.temperature:g}, "
        f"top-k {sampling.top_k}, top-p {sampling.top_p:g}), γ = {setup['gamma']}. "
        f"Machine: {env['platform']}, {env['threads']} torch threads, device {env['device']} "
        f"(capability {env['cpu_capability']}, AMX {'yes' if env['amx'] else 'no'}), target {env['target_dtype']}, "
        f"draft {env['draft_dtype']}, torch {env['torch']}, transformers {env['transformers']}. "
        f"Wall time of the whole run: {payload.get('wall_s', 0) / 60:.1f} min.",
        "",
        "| method | eager tok/s | fast tok/s | fast / eager | vs sampling (fast) | block eff. | acceptance | target % | draft % | other % |",  # noqa: E501 (a table's header row)
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method in dict.fromkeys(r["method"] for r in payload["rows"] if r["impl"] == "ours"):
        e, f = rows.get(f"{method} eager"), rows.get(f"{method} fast")
        if not (e and f):
            continue
        lines.append(
            f"| {method} | {e['tokens_per_s']:.2f} | {f['tokens_per_s']:.2f} | {_fmt(f.get('vs_eager'))} | "
            f"{_fmt(f.get('speedup_vs_sampling'))} | {_fmt(f.get('block_efficiency'))} | "
            f"{_fmt(f.get('acceptance_rate'))} | {_fmt(100 * f['target_frac'], '{:.0f}')} | "
            f"{_fmt(100 * f['draft_frac'] if f['draft_frac'] else None, '{:.0f}')} | "
            f"{_fmt(100 * f['other_frac'], '{:.1f}')} |"
        )
    lines += [
        "",
        "References and compiled paths (compile time measured on the warm-up call, excluded from tokens/s):",
        "",
        "| run | tok/s | ours (fast) / this | first call (s) | second call (s) | compile (s) | compilations | while timed |",  # noqa: E501 (a table's header row)
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    warm = payload.get("warm_up", {})
    for r in payload["rows"]:
        if r["impl"] == "ours" and r["path"] != "compiled":
            continue
        ours = rows.get(f"{r['method']} fast")
        w = warm.get(r["label"], {})
        lines.append(
            f"| {r['label']} | {r['tokens_per_s']:.2f} | {_fmt(ours and ours['tokens_per_s'] / r['tokens_per_s'])} | "
            f"{_fmt(w.get('first_call_s'), '{:.1f}')} | {_fmt(w.get('second_call_s'), '{:.1f}')} | "
            f"{_fmt(w.get('compile_s'), '{:.1f}')} | {_fmt(w.get('compiles'), '{}')} | {r['compiles_while_timed']} |"
        )
    lines += _sampling_lines(payload)
    curve = payload.get("curve")
    if curve:
        widths = sorted({int(w) for c in curve["curves"] for w in c["ms"]})
        lines += [
            "",
            f"Cost of one forward (ms, median) on a {curve['context']}-token cache, by number of new tokens; "
            f"floor = weight bytes / copy bandwidth ({curve['copy_bandwidth_gb_s']:.1f} GB/s):",
            "",
            "| model | dtype | path | threads | "
            + " | ".join(f"{w} tok" for w in widths)
            + " | floor | 1 tok / floor | 5 tok / 1 tok |",
            "|---|---|---|---:|" + "---:|" * (len(widths) + 3),
        ]
        for c in curve["curves"]:
            ms = {int(k): v for k, v in c["ms"].items()}
            cells = " | ".join(_fmt(ms.get(w), "{:.1f}") for w in widths)
            five = ms.get(5) / ms[1] if ms.get(5) else None
            lines.append(
                f"| {c['model']} | {c['dtype']} | {c['path']} | {c['threads']} | {cells} | {c['floor_ms']:.1f} | "
                f"{ms[1] / c['floor_ms']:.2f} | {_fmt(five)} |"
            )
        lines += _products_lines(curve)
    if payload.get("predicted"):
        p = payload["predicted"]
        lines += [
            "",
            f"SpS speed-up over sampling that these costs predict (fast path, γ = {setup['gamma']}, "
            f"target {p['dtype']}): "
            + ", ".join(f"α = {a}: {v:.2f}x" for a, v in p["by_alpha"].items())
            + f"; at the α implied by the measured block efficiency ({_fmt(p.get('measured_alpha'))}): "
            f"{_fmt(p.get('at_measured'))}x predicted, "
            f"{_fmt(p.get('measured'))}x measured.",
        ]
    lines += _goals_lines(payload)
    if payload.get("notes"):
        lines += ["", "## Notes", "", *payload["notes"]]
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")
