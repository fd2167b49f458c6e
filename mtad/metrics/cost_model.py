"""Modelled speed from counts: what a cell's target and draft calls would cost on a device.

A generation's counts (``decode_stats``: target calls, the tokens each verified, draft calls, tree
nodes) are properties of the method and the pair, the same on any machine for the same seed. A
device profile says what one call costs there:

- ``T(w)``: a target forward over ``w`` new tokens (the pending token plus the drafted tokens or
  tree nodes it verifies) on a cache of the run's context;
- ``D(r)``: one draft step over ``r`` rows (the tokens it runs: 1 for a chain's step, the beam width or
  tree level otherwise, more where it catches up on accepted tokens; counted per generation);
- ``h``: host work per target call (sampling, acceptance rules, caches) beyond the forwards;
- ``F(P)``: a generation's prefill of its ``P``-token prompt (target and draft).

Then, for ``n`` new tokens from ``C`` target calls and ``C_d`` draft calls over ``G`` prompts,

    seconds = G · F(P̄) + C · (T(w̄) + h) + C_d · D(r̄),    w̄ = 1 + verified / C,   r̄ = draft rows / C_d,

and a method's modelled speed-up over sampling is sampling's modelled seconds (``n`` width-1 calls,
the same prefill) over these. For a chain with draft length γ on a memory-bound device
(``T(w) ≈ T(1)``, ``h ≈ 0``) and a draft cost ratio ``c = D / T(1)``, block efficiency E[tokens]
= n / C and C_d = γ C, so the speed-up is E[tokens] / (γ c + 1): Leviathan et al. (2023), Thm 3.8.

Profiles (``DeviceProfile``): *this machine* fitted to the costs of generations ``make bench``
times (``fit_profile``: T and D linear in width and rows, F per prompt token, h per method, by
least squares over each generation's split of its time), or read from the isolated forwards its cost
curve times (``from_bench``); and memory-bound accelerators from published bandwidth and peak compute
(``accelerator_profile``, figures and their sources in ``ACCELERATORS``), for a pair given by its
parameter counts (``PAIR_SIZES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import nnls

from mtad.decode_stats import DecodeStats, host_seconds


# --------------------------------------------------------------------------- published figures
@dataclass(frozen=True)
class Accelerator:
    """An accelerator's datasheet figures (dense, no sparsity) and the per-forward overhead assumed."""

    name: str
    bandwidth_gb_s: float  # memory bandwidth, GB/s
    bf16_tflops: float  # peak dense bf16 tensor throughput, TFLOP/s
    source: str  # where the two figures are published
    layer_overhead_ms: float = 0.01  # fixed cost per layer of one forward (kernel launches): assumed
    overhead_source: str = "assumed: 10 µs per layer per forward (launches of fused kernels); not published"


ACCELERATORS = {
    "h200": Accelerator(
        "NVIDIA H200 SXM",
        4800.0,
        989.0,
        "NVIDIA H200 Tensor Core GPU datasheet (2024): 4.8 TB/s HBM3e, 989 TFLOPS bf16 dense (1,979 with sparsity)",
    ),
    "h100": Accelerator(
        "NVIDIA H100 SXM",
        3350.0,
        989.0,
        "NVIDIA H100 Tensor Core GPU datasheet (2023): 3.35 TB/s HBM3, 989 TFLOPS bf16 dense (1,979 with sparsity)",
    ),
    "a100": Accelerator(
        "NVIDIA A100 80GB SXM",
        2039.0,
        312.0,
        "NVIDIA A100 Tensor Core GPU datasheet (2021): 2,039 GB/s HBM2e, 312 TFLOPS bf16 dense (624 with sparsity)",
    ),
}
DEFAULT_ACCELERATOR = "h100"  # the modelled column of the report and Table 2


@dataclass(frozen=True)
class ModelSize:
    """What a forward reads and launches: parameters, layers, and the KV cache bytes per token of
    context (2 · layers · KV heads · head dim · bytes)."""

    params: float
    layers: int
    kv_bytes_per_token: float
    source: str


def _size(params: float, layers: int, kv_heads: int, head_dim: int, source: str, dtype_bytes: int = 2) -> ModelSize:
    return ModelSize(params, layers, 2.0 * layers * kv_heads * head_dim * dtype_bytes, source)


# each model's published config (config.json on its hub page; `source`) gives its layers and attention
# shapes; its parameter count is computed from those shapes (embeddings, layers, head; config.json
# itself states no count), e.g. SmolLM2-135M: 49152·576 + 30·(2·576² + 2·576·192 + 3·576·1536) ≈ 134.5 M
MODELS = {
    "SmolLM2-135M": _size(134.5e6, 30, 3, 64, "HuggingFaceTB/SmolLM2-135M-Instruct config.json"),
    "SmolLM2-135M feature head": _size(
        4.2e6, 1, 3, 64, "mtad/assets/drafts/smollm2_135m_head.safetensors: 4.2M parameters (one layer, head)"
    ),
    "Llama-2-7B": _size(6.74e9, 32, 32, 128, "meta-llama/Llama-2-7b-hf config.json"),
    "Llama-2-13B": _size(13.0e9, 40, 40, 128, "meta-llama/Llama-2-13b-hf config.json"),
    "Llama-2-70B": _size(69.0e9, 80, 8, 128, "meta-llama/Llama-2-70b-hf config.json"),
    "Llama-68M": _size(68.0e6, 2, 12, 64, "JackFram/llama-68m config.json"),
    "OPT-125M": _size(125.2e6, 12, 12, 64, "facebook/opt-125m config.json"),
    "OPT-350M": _size(331.2e6, 24, 16, 64, "facebook/opt-350m config.json"),
    "OPT-13B": _size(12.85e9, 40, 40, 128, "facebook/opt-13b config.json"),
    "OPT-30B": _size(29.97e9, 48, 56, 128, "facebook/opt-30b config.json"),
    "OPT-66B": _size(65.7e9, 64, 72, 128, "facebook/opt-66b config.json"),
    "Llama-3.1-8B": _size(8.03e9, 32, 8, 128, "meta-llama/Llama-3.1-8B config.json"),
    "Llama-3.2-1B": _size(1.24e9, 16, 8, 64, "meta-llama/Llama-3.2-1B config.json"),
}
# pair config name -> (target, draft) in MODELS
PAIR_SIZES = {
    "smollm2_135m_head": ("SmolLM2-135M", "SmolLM2-135M feature head"),
    "llama2_13b_68m": ("Llama-2-13B", "Llama-68M"),
    "llama2_13b_7b": ("Llama-2-13B", "Llama-2-7B"),
    "llama2_70b_68m": ("Llama-2-70B", "Llama-68M"),
    "llama2_70b_7b": ("Llama-2-70B", "Llama-2-7B"),
    "opt_13b_125m": ("OPT-13B", "OPT-125M"),
    "opt_30b_350m": ("OPT-30B", "OPT-350M"),
    "opt_66b_350m": ("OPT-66B", "OPT-350M"),
    "llama31_8b_32_1b": ("Llama-3.1-8B", "Llama-3.2-1B"),
    "llama31_8b_32_1b_instruct": ("Llama-3.1-8B", "Llama-3.2-1B"),
}


# --------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class DeviceProfile:
    """What one call costs on a device, in ms: ``target_ms(w)`` for a ``w``-token target forward,
    ``draft_ms(r)`` for an ``r``-row draft step, ``host_ms`` per target call beyond the forwards."""

    name: str
    target_ms: Callable[[float], float]
    draft_ms: Callable[[float], float]
    host_ms: float = 0.0
    sources: dict = field(default_factory=dict)
    prefill_ms: Callable[[float], float] | None = None  # one prompt of P tokens, target and draft (None: left out)


def roofline_ms(size: ModelSize, accelerator: Accelerator, width: float, context: int, dtype_bytes: int = 2) -> float:
    """One forward of ``width`` tokens over ``context`` cached ones: the fixed overhead per layer, plus the
    longer of reading the weights and cache (bytes / bandwidth) and multiplying (2 · params · width
    FLOPs / peak); memory-bound until width ≈ peak · bytes / (2 · bandwidth), hundreds of tokens."""
    bytes_read = size.params * dtype_bytes + size.kv_bytes_per_token * context
    memory_s = bytes_read / (accelerator.bandwidth_gb_s * 1e9)
    compute_s = 2.0 * size.params * width / (accelerator.bf16_tflops * 1e12)
    return accelerator.layer_overhead_ms * size.layers + 1e3 * max(memory_s, compute_s)


def accelerator_profile(pair: str, accelerator: str = DEFAULT_ACCELERATOR, context: int = 512) -> DeviceProfile:
    """The memory-bound profile of ``pair`` (a key of ``PAIR_SIZES``) on ``accelerator`` (a key of
    ``ACCELERATORS``) at a ``context``-token cache."""
    if pair not in PAIR_SIZES:
        raise KeyError(f"no parameter counts for pair {pair!r}; known: {', '.join(PAIR_SIZES)}")
    if accelerator not in ACCELERATORS:
        raise KeyError(f"unknown accelerator {accelerator!r}; known: {', '.join(ACCELERATORS)}")
    device = ACCELERATORS[accelerator]
    target, draft = (MODELS[name] for name in PAIR_SIZES[pair])
    return DeviceProfile(
        f"{device.name} (modelled)",
        lambda w: roofline_ms(target, device, w, context),
        lambda r: roofline_ms(draft, device, r, context),
        0.0,
        {
            "device": device.source,
            "overhead": device.overhead_source,
            "target": MODELS[PAIR_SIZES[pair][0]].source,
            "draft": MODELS[PAIR_SIZES[pair][1]].source,
        },
        lambda p: roofline_ms(target, device, p, 0) + roofline_ms(draft, device, p, 0),
    )


def curve(ms_by_width: dict) -> Callable[[float], float]:
    """Linear interpolation of measured ms over width; beyond the widest width measured, extended
    along the last segment's slope (a wide tree costs more than the widest forward timed)."""
    widths = sorted(float(w) for w in ms_by_width)
    ms = [float(ms_by_width[w] if w in ms_by_width else ms_by_width[str(int(w))]) for w in widths]

    def at(width: float) -> float:
        if len(widths) > 1 and width > widths[-1]:
            slope = (ms[-1] - ms[-2]) / (widths[-1] - widths[-2])
            return ms[-1] + max(slope, 0.0) * (width - widths[-1])
        return float(np.interp(width, widths, ms))

    return at


def from_bench(payload: dict, dtype: str, path: str = "fast", host_ms: float = 0.0) -> DeviceProfile:
    """This machine's profile from ``make bench``'s curves (``payload["curve"]``) of the target and
    the draft at ``dtype`` on ``path``."""
    curves = {(c["model"], c["dtype"], c["path"]): c["ms"] for c in payload["curve"]["curves"]}
    missing = [m for m in ("target", "draft") if (m, dtype, path) not in curves]
    if missing:
        have = sorted({f"{m} {d} {p}" for m, d, p in curves})
        raise KeyError(f"the bench has no {' or '.join(missing)} curve at {dtype} on {path}; it has: {have}")
    machine = payload.get("environment", {}).get("machine", "this machine")
    return DeviceProfile(
        f"{machine} (from make bench)",
        curve(curves[("target", dtype, path)]),
        curve(curves[("draft", dtype, path)]),
        host_ms,
        {"device": f"make bench cost curves ({dtype}, {path}, context {payload['curve'].get('context')})"},
    )


# --------------------------------------------------------------------------- the model
# what the model reads of a record or of totals: the decode statistics' counts it uses (decode_stats),
# and how many generations were summed
COUNT_FIELDS = (
    "new_tokens",
    "target_calls",
    "draft_calls",
    "drafted",
    "tree_nodes",
    "draft_rows",
    "prompt_tokens",
    "generations",
)


def _count(totals: Mapping, name: str) -> int:
    """A count of `totals`, 0 where it is absent, None or NaN (a cell frame's empty column)."""
    value = totals.get(name)
    return 0 if value is None or value != value else int(value)


def draft_rows_per_call(totals: Mapping) -> float:
    """Rows one draft forward read on average: the record's ``draft_rows`` over its draft calls;
    1.0 where there are none (sampling), a value the model multiplies by those 0 draft calls."""
    draft_calls = _count(totals, "draft_calls")
    return _count(totals, "draft_rows") / draft_calls if draft_calls else 1.0


@dataclass(frozen=True)
class Counts:
    """A cell's (or a generation's) counts, the inputs of the model."""

    new_tokens: int
    target_calls: int
    draft_calls: int = 0
    drafted: int = 0  # γ per iteration for chains, the depth for trees
    tree_nodes: int = 0  # draft tokens a tree method's target calls scored
    draft_rows_per_call: float = 1.0  # rows one draft forward reads, on average (`draft_rows_per_call`)
    prompt_tokens: int = 0  # prompt tokens prefilled, over `generations` prompts
    generations: int = 0

    @classmethod
    def of(cls, stats: Mapping | DecodeStats) -> "Counts":
        """The one reading of counts: from one generation's record (a ``DecodeStats`` or its
        ``as_dict()``, a bench generation) or from totals with the same names and ``generations``
        (a cell's metrics.json or ``aggregate_speed``, the per-example sums of the claims report, a
        bench row's counts). A mapping without ``generations`` is one generation; a count absent,
        None or NaN is 0."""
        totals = stats.as_dict() if isinstance(stats, DecodeStats) else stats
        return cls(
            _count(totals, "new_tokens"),
            _count(totals, "target_calls"),
            _count(totals, "draft_calls"),
            _count(totals, "drafted"),
            _count(totals, "tree_nodes"),
            draft_rows_per_call(totals),
            _count(totals, "prompt_tokens"),
            _count(totals, "generations") if "generations" in totals else 1,
        )

    @property
    def verified_per_call(self) -> float:
        """Tokens one target call verifies beyond the pending one: tree nodes, else drafted tokens."""
        if not self.target_calls:
            return 0.0
        return (self.tree_nodes or self.drafted) / self.target_calls

    @property
    def baseline(self) -> "Counts":
        """Sampling's counts for the same tokens and prompts: one width-1 target call per token."""
        return Counts(self.new_tokens, self.new_tokens, prompt_tokens=self.prompt_tokens, generations=self.generations)


def modelled_seconds(counts: Counts, profile: DeviceProfile) -> float:
    """G · F(P̄) + C · (T(1 + verified per call) + h) + C_d · D(draft rows per call), in seconds; the
    prefill term where the profile models one (``prefill_ms``) and the counts hold prompts."""
    target = counts.target_calls * (profile.target_ms(1.0 + counts.verified_per_call) + profile.host_ms)
    draft = counts.draft_calls * profile.draft_ms(counts.draft_rows_per_call) if counts.draft_calls else 0.0
    prefill = 0.0
    if counts.generations and counts.prompt_tokens and profile.prefill_ms is not None:
        prefill = counts.generations * profile.prefill_ms(counts.prompt_tokens / counts.generations)
    return (target + draft + prefill) / 1e3


def modelled_tokens_per_s(counts: Counts, profile: DeviceProfile) -> float:
    return counts.new_tokens / modelled_seconds(counts, profile)


def modelled_speedup(counts: Counts, profile: DeviceProfile, baseline: Counts | None = None) -> float:
    """Modelled tokens/s over the baseline's (default: sampling, one width-1 call per token)."""
    baseline = baseline or counts.baseline
    return modelled_tokens_per_s(counts, profile) / modelled_tokens_per_s(baseline, profile)


# --------------------------------------------------------------------------- a profile fitted to timed generations
@dataclass(frozen=True)
class GenerationCost:
    """One timed generation: its counts (``generations`` 1) and where its wall time went."""

    method: str
    counts: Counts
    seconds: float  # wall time, prefill included
    prefill_seconds: float  # the prompt's forwards, target and draft
    target_seconds: float  # target forwards after the prefill
    draft_seconds: float  # draft forwards after the prefill

    @property
    def host_seconds(self) -> float:
        """Everything outside the forwards (`decode_stats.host_seconds`)."""
        return host_seconds(self.seconds, self.prefill_seconds + self.target_seconds + self.draft_seconds)

    @classmethod
    def of(cls, method: str, record: Mapping) -> "GenerationCost":
        """One generation's cost from its record, a ``DecodeStats.as_dict()``: its counts
        (``Counts.of``) and its forwards' seconds with their prefills taken out."""
        target_prefill, draft_prefill = record["target_prefill_seconds"], record["draft_prefill_seconds"]
        target, draft = record["target_seconds"] - target_prefill, record["draft_seconds"] - draft_prefill
        return cls(method, Counts.of(record), record["seconds"], target_prefill + draft_prefill, target, draft)


def _non_negative_fit(columns: list[list[float]], seconds: list[float]) -> tuple[float, ...]:
    """Least-squares coefficients ≥ 0 of ``seconds ≈ Σ coefficient · column``, in ms per unit."""
    if not seconds:
        return (0.0,) * len(columns)
    coefficients, _ = nnls(np.array(columns, dtype=float).T, 1e3 * np.array(seconds, dtype=float))
    return tuple(float(c) for c in coefficients)


@dataclass(frozen=True)
class FittedProfile:
    """A machine's costs fitted to timed generations: ``T(w) = a + b·w`` over the target calls'
    totals (``a·C + b·Σw``, Σw = C + tokens verified), ``D(r) = c + d·r`` over the draft calls'
    (``c·C_d + d·Σr``), prefill ``F(P) = e·P``, and each method's host work per target call."""

    target: tuple[float, float]  # a (ms per call), b (ms per token of width)
    draft: tuple[float, float]  # c (ms per call), d (ms per row)
    prefill_per_token_ms: float
    host_ms: dict[str, float]  # method -> host work per target call
    generations: int  # how many it was fitted to
    shared_host_ms: float = 0.0  # one host term for every method: all their host time per target call

    def profile(self, method: str, name: str = "this machine (fitted)", host_ms: float | None = None) -> DeviceProfile:
        """The profile of `method`'s generations: its own fitted host work, or `host_ms` given
        (e.g. measured by a block profile, so that nothing of it is fitted to the tested rows)."""
        if host_ms is None and method not in self.host_ms:
            raise KeyError(f"no fitted host work for {method!r}; fitted: {', '.join(self.host_ms)}")
        (a, b), (c, d) = self.target, self.draft
        return DeviceProfile(
            name,
            lambda w: a + b * w,
            lambda r: c + d * r,
            self.host_ms[method] if host_ms is None else host_ms,
            {"device": f"least squares over {self.generations} timed generations"},
            lambda p: self.prefill_per_token_ms * p,
        )


def fit_profile(generations: list[GenerationCost]) -> FittedProfile:
    """The linear costs of ``FittedProfile`` from ``generations`` (several methods, so that widths
    and rows vary). Host work is each method's own: its time outside the forwards per target call."""
    calls = [g.counts for g in generations]
    target = _non_negative_fit(
        [[c.target_calls for c in calls], [c.target_calls + (c.tree_nodes or c.drafted) for c in calls]],
        [g.target_seconds for g in generations],
    )
    drafting = [g for g in generations if g.counts.draft_calls]
    draft = _non_negative_fit(
        [
            [g.counts.draft_calls for g in drafting],
            [g.counts.draft_calls * g.counts.draft_rows_per_call for g in drafting],
        ],
        [g.draft_seconds for g in drafting],
    )
    prompt_tokens = sum(c.prompt_tokens for c in calls)
    prefill = 1e3 * sum(g.prefill_seconds for g in generations) / prompt_tokens if prompt_tokens else 0.0

    def host_per_call(gs: list[GenerationCost]) -> float:
        return 1e3 * sum(g.host_seconds for g in gs) / max(sum(g.counts.target_calls for g in gs), 1)

    host = {
        m: host_per_call([g for g in generations if g.method == m])
        for m in dict.fromkeys(g.method for g in generations)
    }
    return FittedProfile(target, draft, prefill, host, len(generations), host_per_call(generations))
