"""What one forward costs, per dtype, path and thread count: the verification-cost curve
(`verification_curve`: ms of a forward of 1, 2, 3, 5, 9, 17 tokens (to 9 for a 4-bit target) on a
cached context, timed by `mtad.generation.forward_ms`), the floor of a decode step (`weight_bytes` /
`copy_bandwidth`), the matrix products a forward runs (`matrix_products`) timed alone
(`products_ms`, `linear_only_ms`) and requantized to per-row int8 (`int8_products`), and the
models of each dtype a curve runs (`curve_model`). The quantized targets (q4_1, int8) are dtypes
of the curve like the dense ones; those with float32 activations stop at 9 tokens."""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mtad.decoding.kernels import KernelChoice
from mtad.decoding.kernels import choose as choose_kernels
from mtad.decoding.layer_math import fused_weights
from mtad.decoding.static_kv import resolve_decode_path
from mtad.devices import model_device, sync, torch_threads
from mtad.generation import forward_ms
from mtad.models.pairs import QUANTIZED_DTYPES
from mtad.models.quantized import per_row_int8
from mtad.provenance import dtype_name

# the bench's torch threads (`scripts/bench.py --threads`): every core of the 2-core CPU the committed
# bench ran on, which it has to itself (a quiet machine); the studies' Hydra default is 1 (conf/config.yaml)
# because they run beside other work, where 2 threads oversubscribe. The curve times 1 beside it and the
# calibration picks between the two
BENCH_THREADS = 2

# ------------------------------------------------------------------ the floor of a decode step


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

PRODUCT_WIDTHS = (1, 5, 9, 17)  # widths at which a forward is set beside its matrix products


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
    """Each dense product requantized to int8 codes with one scale per row (`per_row_int8`, as the
    int8 target's) and run by `aten._weight_int8pack_mm` on float32 inputs: the float32 fast path's
    products as the int8 kernel would run them, fused ones included. Quantized products are left out."""
    out = []
    for p in products:
        if p.weight is None:
            continue
        codes, scales = per_row_int8(p.weight)  # [N, K] int8, [N] float32

        def run(x, codes=codes, scales=scales):
            return torch.ops.aten._weight_int8pack_mm(x, codes, scales)  # [M, K] -> [M, N]

        out.append(Product(f"{p.name} int8", p.in_features, run))
    return out


@torch.inference_mode()
def products_ms(
    products: list[Product],
    width: int,
    dtype: torch.dtype,
    device: torch.device,
    reps: int = 10,
    kernels: KernelChoice | None = None,
) -> float:
    """Median wall time (ms) of running every product once, back to back, each on its own random
    input [width, in_features] of `dtype`, under `kernels`' kernel for that width (the one the fast
    path's forward of that width runs; None: oneDNN); two warm-up rounds first."""
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(width, p.in_features, generator=gen).to(device, dtype) for p in products]
    times = []
    with kernels.scope(width) if kernels is not None else contextlib.nullcontext():
        for _ in range(reps + 2):
            start = time.perf_counter()
            for p, x in zip(products, inputs):
                p.run(x)
            sync(device)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[2:])


def path_kernels(model, path: str) -> KernelChoice | None:
    """The product kernels a forward of `model` on `path` runs under (None: oneDNN throughout)."""
    return choose_kernels(model) if path != "eager" else None


def linear_only_ms(model, width: int, reps: int = 10, path: str = "fast") -> float:
    """The matrix products alone of one `width`-token forward of `model` on `path`
    (`matrix_products`, under the path's kernel for that width), in ms: the part of `forward_ms`
    that is neither attention nor the elementwise work between products."""
    products = matrix_products(model, path)
    return products_ms(products, width, model.dtype, model_device(model), reps, path_kernels(model, path))


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
    threads: tuple[int, ...] = (1, BENCH_THREADS),
    widths: tuple[int, ...] = (1, 2, 3, 5, 9, 17),  # 17: a 16-node tree and its pending token
    context: int = 200,
    reps: int = 10,
    log=print,
    targets: tuple = (),
) -> dict:
    """ms per target forward of each width, per dtype: on the eager path at the current thread
    count, on the fast path at each count in `threads` (the calibration of dtype and threads);
    beside it, at widths 1, 5, 9, 17, its matrix products alone (`linear_ms`); the draft's 1-token
    step per dense dtype and thread count; the bandwidth floor of a 1-token step; the products of
    the float32 fast path requantized to per-row int8 (`int8_products`, a third of the repetitions
    at least 2). `targets`: targets in dtypes a cast cannot make (the quantized ones), used for
    those dtypes."""
    bandwidth = copy_bandwidth(model_device(target))
    current = torch.get_num_threads()  # the eager path's count
    curves, int8 = [], []
    product_widths = tuple(w for w in PRODUCT_WIDTHS if w in widths)

    def floor(model) -> float:
        return 1000 * weight_bytes(model) / bandwidth

    for dtype in dtypes:
        model = curve_model(dtype, [target, *targets])
        small = None if hasattr(model, "mtad_dtype") else curve_model(dtype, [draft])  # drafts stay dense
        for path, counts in (("eager", (current,)), ("fast", threads)):
            products = matrix_products(model, path)
            as_int8 = int8_products(products) if dtype == "float32" and path == "fast" else []
            for n_threads in counts:
                with torch_threads(n_threads):
                    row = {"model": "target", "dtype": dtype, "path": path, "threads": n_threads}
                    label = f"curve {dtype} {path} {n_threads} threads"
                    ms, linear, noise = _timed_target(model, dtype, path, products, widths, context, reps, label, log)
                    curves.append({**row, "ms": ms, "linear_ms": linear, "floor_ms": floor(model), "noise": noise})
                    log(f"{label}: target {_ms(ms)} (floor {floor(model):.1f} ms)")
                    log(f"{label}: its products alone {_ms(linear)}")
                    if as_int8:
                        int8.append(_int8_row(as_int8, product_widths, model_device(model), path, n_threads, reps, log))
                    if small is not None:
                        draft_ms = {w: forward_ms(small, path, w, context, reps, target=model) for w in (1, 4)}
                        curves.append({**row, "model": "draft", "ms": draft_ms, "floor_ms": floor(small)})
                        log(f"{label}: draft {_ms(draft_ms)}")
    return {"context": context, "copy_bandwidth_gb_s": bandwidth / 1e9, "curves": curves, "int8_products": int8}


def curve_from_json(curve: dict) -> dict:
    """A curve read back from JSON, its widths ints again (JSON made them strings)."""
    for row in [*curve["curves"], *curve.get("int8_products", [])]:
        for key in ("ms", "linear_ms"):
            if key in row:
                row[key] = {int(w): v for w, v in row[key].items()}
    return curve


def _timed_target(model, dtype: str, path: str, products, widths, context: int, reps: int, label: str, log):
    """The target's forward of each width and, at `PRODUCT_WIDTHS`, its products alone; a row that
    contradicts itself is timed again, up to `REMEASURES` times -> (ms, linear ms, what was noisy)."""
    product_widths = tuple(w for w in PRODUCT_WIDTHS if w in widths)
    for _ in range(1 + REMEASURES):
        ms = {w: forward_ms(model, path, w, context, reps) for w in _widths(dtype, widths)}
        kernels = path_kernels(model, path)
        linear = _products_curve(
            products, _widths(dtype, product_widths), model.dtype, model_device(model), reps, kernels
        )
        noise = contradictions(ms, linear)
        if not noise:
            break
        log(f"{label}: {'; '.join(noise)}: timed again")
    return ms, linear, noise


def _int8_row(products, product_widths, device, path: str, n_threads: int, reps: int, log) -> dict:
    """The float32 fast path's products requantized to per-row int8, timed to `QUANTIZED_MAX_WIDTH`
    rows (seconds at 17) with a third of the repetitions, at least 2 (about 1 s at 9 rows on 2 cores)."""
    int8_widths = tuple(w for w in product_widths if w <= QUANTIZED_MAX_WIDTH)
    int8_ms = _products_curve(products, int8_widths, torch.float32, device, max(2, reps // 3))
    log(f"curve int8 per-row products {n_threads} threads: {_ms(int8_ms)}")
    return {"path": path, "threads": n_threads, "linear_ms": int8_ms}


REMEASURES = 2  # times a self-contradicting row is timed again before it is reported as noisy
NOISE_TOLERANCE = 0.10  # a wider forward may cost this much less than a narrower one before it counts


def contradictions(ms: dict, linear: dict) -> list[str]:
    """What makes a row of forward costs impossible as a measurement of one machine at rest: its
    matrix products alone longer than the whole forward of the same width, or a wider forward
    cheaper than a narrower one by more than `NOISE_TOLERANCE` (it computes strictly more)."""
    found = [
        f"products {linear[w]:.1f} ms > forward {ms[w]:.1f} ms at {w} tokens"
        for w in sorted(linear)
        if w in ms and linear[w] > ms[w]
    ]
    widths = sorted(ms)
    for narrow, wide in zip(widths, widths[1:]):
        if ms[wide] < (1 - NOISE_TOLERANCE) * ms[narrow]:
            found.append(f"{wide} tokens {ms[wide]:.1f} ms < {narrow} tokens {ms[narrow]:.1f} ms")
    return found


QUANTIZED_MAX_WIDTH = 9  # the widest forward timed for a target in `GENERIC_LOOP_DTYPES`
# float32 activations: the weight-only kernels' generic loop on x86, whose 17-token forward takes seconds
GENERIC_LOOP_DTYPES = ("q4_1", "int8")


def _widths(dtype: str, widths: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(w for w in widths if dtype not in GENERIC_LOOP_DTYPES or w <= QUANTIZED_MAX_WIDTH)


def _products_curve(products: list[Product], widths, dtype, device, reps: int, kernels=None) -> dict[int, float]:
    return {w: products_ms(products, w, dtype, device, reps, kernels) for w in widths}


def _ms(by_width: dict) -> str:
    return ", ".join(f"{w}: {v:.1f}" for w, v in by_width.items()) + " ms"
