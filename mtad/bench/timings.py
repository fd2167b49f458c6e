"""The bench's rows: the configurations measured (`Config`: every method on the eager and fast
paths, transformers' generate() eager and with static cache + compile, assisted generation, sampling
with other targets; `default_configs`, `method_params`, `budget_configs`), the warm-up calls that
time compilation (`warm_up`, through `run`), each row's medians and counts from its repetitions
(`summarise`), the machine (`environment`), the other targets and the verification-cost curve with
its calibration. The timed repetitions are cells (`mtad.experiments.bench_cells`).

A timed generation is the decoders' own record, `DecodeStats`: ours as `Decoder.generate` fills it,
transformers' with what `generate()` lets us see (`hf_generate`, `hf_assisted`). A row's totals are
the runner's cell totals of its records (`aggregate_speed`), and the cost model reads them and each
generation's record as it reads a cell's (`mtad.metrics.cost_model.Counts.of`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from mtad.bench.calibrate import calibration
from mtad.bench.curves import curve_from_json, verification_curve
from mtad.bench.rows import find_row
from mtad.decode_stats import COUNTS, DecodeStats, host_seconds
from mtad.decoding import DecoderParams, SpecInferParams
from mtad.decoding.registry import REFERENCE, VANILLA, implementations_of, spec, specs
from mtad.decoding.static_kv import kernel_record, resolve_decode_path
from mtad.generation import build_decoder, timed_generate
from mtad.metrics.speed import aggregate_speed
from mtad.models.pairs import QUANTIZED_DTYPES, auto_dtype, auto_meaning, cpu_flags, load_target_and_tokenizer
from mtad.provenance import dtype_name, machine_key
from mtad.records import read_json, write_json


@dataclass
class Config:
    """One row of the benchmark: an implementation of a method at given settings on one path."""

    label: str
    impl: str  # "ours" | "hf"
    method: str  # our decoder name; for hf: "sampling" (generate) or "sps" (assisted generation)
    params: DecoderParams  # the method's settings (for hf: those of `method`)
    path: str = "eager"  # ours: a decode_path; hf: "eager" | "static+compile"
    target_dtype: str | None = None  # another target than the pair's (a key of `targets`, e.g. "q4_1")
    # "adaptive": the method with adaptive drafting (its `MethodSpec.adaptive_stop`); "budget": a tree method
    # verifying at most the calibration's node budget (`budget_configs`); each beside its fixed self
    variant: str = ""

    @property
    def decoder(self) -> str:
        """The registered method the row's cell runs: ours, or transformers' own (`hf_generate`,
        `hf_assisted`: the reference implementations of sampling and SpS)."""
        return self.method if self.impl == "ours" else implementations_of()[self.method]

    @property
    def decode_path(self) -> str | None:
        """Our decode path; None for transformers' own (its cache is a setting: `static_compile`)."""
        return self.path if self.impl == "ours" else None

    @property
    def decoder_params(self) -> DecoderParams:
        """The settings of `decoder`: an HF row's sampling settings (and γ), its static cache with compile."""
        if self.impl == "ours":
            return self.params
        fields = {k: v for k, v in asdict(self.params).items() if k in spec(self.decoder).settings.names()}
        if self.method == REFERENCE:  # generate() itself, eager or with its static cache compiled
            fields["static_compile"] = self.path == "static+compile"
        return spec(self.decoder).settings(**fields)


Repetition = list[DecodeStats]  # one config's generations in one repetition, one per prompt in order


PATHS = ("eager", "fast")


def method_params(gamma: int) -> dict[str, DecoderParams]:
    """Each study method at its defaults, the settings its config runs (`MethodSpec.bench_params`),
    with draft length γ, in table order."""
    return {name: spec.bench_params(gamma) for name, spec in specs().items()}


HF_REFERENCE_DTYPE = "float32"  # HF eager generate() on this target is the reference of goal (c)
# adaptive drafting's threshold per method on the embedded pair is its `MethodSpec.adaptive_stop`,
# chosen from the draft calls and tree nodes it saves against the block efficiency it costs on
# held-out chat prompts; the effect per method is in results/bench/profile_adaptive.md
# (`make profile PROFILE_ARGS=--adaptive`)


def tree_nodes(params: DecoderParams) -> int:
    """The most draft nodes one verification of a tree method holds: SpecInfer's whole k_config tree
    (k1 + k1·k2 + ...), MMTAD's W beams of γ tokens (shared prefixes make it fewer)."""
    if isinstance(params, SpecInferParams):
        return sum(math.prod(params.k_config[: d + 1]) for d in range(len(params.k_config)))
    return params.beam_width * params.gamma


def budget_configs(gamma: int, nodes: int) -> list[Config]:
    """SpecInfer and MMTAD on the fast path verifying at most `nodes` tree nodes (the calibration's
    `node_budget`: EAGLE-2's dynamic tree at this machine's verification cost), each where that is
    fewer than its whole tree (else the row is its fixed self) and at least its first level."""
    params = method_params(gamma)
    return [
        Config(f"{m} budget fast", "ours", m, replace(params[m], node_budget=nodes), "fast", variant="budget")
        for m, spec in specs().items()
        if "node_budget" in spec.settings.names()  # the methods that verify a tree within a budget
        and getattr(params[m], "k_config", (1,))[0] <= nodes < tree_nodes(params[m])
    ]


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
        Config("HF generate", "hf", REFERENCE, params[REFERENCE], "eager"),
        Config("HF generate static+compile", "hf", REFERENCE, params[REFERENCE], "static+compile"),
    ]
    if pair_dtype != HF_REFERENCE_DTYPE:
        label = f"HF generate {HF_REFERENCE_DTYPE}"
        configs.append(Config(label, "hf", REFERENCE, params[REFERENCE], "eager", HF_REFERENCE_DTYPE))
    if assisted:
        configs.append(Config("HF assisted", "hf", VANILLA, params[VANILLA], "eager"))
    for method, p in params.items():
        spec = specs()[method]
        configs += [Config(f"{method} {path}", "ours", method, p, path) for path in PATHS]
        if spec.adaptive_stop is not None:
            adaptive = replace(p, stop_below=spec.adaptive_stop)
            configs.append(Config(f"{method} adaptive fast", "ours", method, adaptive, "fast", variant="adaptive"))
        if compiled and spec.drafts in ("none", "chain"):  # sampling and SpS: one token or a chain per forward
            configs.append(Config(f"{method} compiled", "ours", method, p, "compiled"))
    for dtype in target_dtypes:
        configs.append(Config(f"{REFERENCE} fast {dtype}", "ours", REFERENCE, params[REFERENCE], "fast", dtype))
    return configs


def run(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int, targets=None):
    """One generation of `config`'s decoder, timed whole (`generation.timed_generate`): on the pair's
    `target`, or on `targets[config.target_dtype]` when it names another."""
    if config.target_dtype:
        target = (targets or {})[config.target_dtype]
    decoder = build_decoder(config.decoder, target, draft, config.decode_path, config.decoder_params)
    out, _ = timed_generate(decoder, prompt, max_new_tokens, torch.Generator().manual_seed(seed))
    return out.stats


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


def totals(generations: list[DecodeStats]) -> dict:
    """The runner's cell totals and ratios of these generations' records (`aggregate_speed`)."""
    return aggregate_speed(g.as_dict() for g in generations)


def generation_records(repetitions: list[Repetition]) -> list[dict]:
    """Every generation's record, tagged with its repetition and prompt: what the cost model is
    fitted to (`mtad.bench.modelled`)."""
    return [{**g.as_dict(), "rep": rep, "prompt": i} for rep, gs in enumerate(repetitions) for i, g in enumerate(gs)]


def summarise(configs: list[Config], results: dict[str, list[Repetition]]) -> list[dict]:
    """One row per config: tokens/s and the split of its time from the median repetition; block
    efficiency, acceptance and the cost model's counts over every repetition (counts do not depend on
    the machine's load, so which repetition was the median must not change them)."""
    rows = []
    for c in configs:
        by_rep = [totals(gs) for gs in results[c.label]]
        rates = [t["tokens_per_s"] for t in by_rep]
        row = {
            "label": c.label,
            "impl": c.impl,
            "method": c.method,
            "path": c.path,
            "target_dtype": c.target_dtype,
            "params": asdict(c.params),
            "variant": c.variant,
            "tokens_per_s": statistics.median(rates),
            "tokens_per_s_reps": rates,
            "compiles_while_timed": sum(g.compiles for gs in results[c.label] for g in gs),
        }
        if c.impl == "ours":
            m = sorted(by_rep, key=lambda t: t["tokens_per_s"])[len(by_rep) // 2]
            every = totals([g for gs in results[c.label] for g in gs])
            row.update(
                target_frac=m["target_seconds"] / m["decode_seconds"],
                draft_frac=m["draft_seconds"] / m["decode_seconds"],
                other_frac=host_seconds(m["decode_seconds"], m["target_seconds"] + m["draft_seconds"])
                / m["decode_seconds"],
                block_efficiency=every["block_efficiency"],
                acceptance_rate=every["acceptance_rate"],
                ms_per_token=1000 * m["decode_seconds"] / m["new_tokens"],
                counts={k: every[k] for k in (*COUNTS, "generations")},  # the cost model's (Counts.of)
                generations=generation_records(results[c.label]),  # what the cost model is fitted to
            )
        rows.append(row)
    for r in rows:
        if r["impl"] != "ours":
            continue
        variant = r.get("variant")
        eager = None if r.get("target_dtype") or variant else find_row(rows, r["method"], "eager")
        base = find_row(rows, REFERENCE, r["path"])
        fixed = find_row(rows, r["method"], r["path"]) if variant else None
        if eager:
            r["vs_eager"] = r["tokens_per_s"] / eager["tokens_per_s"]
        if fixed:
            r["vs_fixed"] = r["tokens_per_s"] / fixed["tokens_per_s"]
        if base:
            r["speedup_vs_sampling"] = r["tokens_per_s"] / base["tokens_per_s"]
        # against every HF row of the same method: generate() (eager, static+compile, the fp32 target), assisted
        hf = [h for h in rows if h["impl"] == "hf" and h["method"] == r["method"]]
        r["vs_hf"] = {h["label"]: r["tokens_per_s"] / h["tokens_per_s"] for h in hf}
    return rows


def environment(target, draft, pair_cfg: dict | None = None) -> dict:
    """The run's environment record and the bench's own facts; `pair_cfg`: the loaded pair's config,
    for what its `auto` dtype means on this machine (measured: `mtad.models.dtype_choice`)."""
    from mtad.provenance import environment_record

    flags = cpu_flags()
    env = environment_record(models=(target, draft))  # the runner's record: machine, versions, code state
    return {
        **env,
        "threads": env["torch_threads"],
        "torch": env["versions"]["torch"],
        "transformers": env["versions"]["transformers"],
        "target_dtype": dtype_name(target),  # q4_1 names its format
        "draft_dtype": dtype_name(draft),
        "device": str(next(target.parameters()).device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "amx": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "auto_dtype": auto_meaning(pair_cfg) if pair_cfg else auto_dtype(next(target.parameters()).device),
        "dtype_choice": (pair_cfg or {}).get("dtype_choice"),
        "kernels": kernel_record({"target": target, "draft": draft}, "fast"),  # the fast path's, per width
        "cuda": env["gpus"][0] if env["gpus"] else None,
    }


def other_targets(pair, dtypes) -> dict:
    """The targets among `dtypes` that a cast of the pair's target cannot make, each loaded once:
    the quantized ones (the GGUF's own 4-bit blocks, the per-row int8 requantization) and float32
    (the published weights, not a cast of a bf16 target) beside the pair's; float32 beside a
    quantized one (the dense dtypes are cast from it)."""
    own = dtype_name(pair.target)
    if own in QUANTIZED_DTYPES:
        wanted = {d if d in QUANTIZED_DTYPES else "float32" for d in dtypes if d != own}
    else:
        wanted = {d for d in dtypes if d in QUANTIZED_DTYPES or (d == "float32" and own != "float32")}
    return {d: load_target_and_tokenizer(pair.config, dtype=d)[0].requires_grad_(False) for d in sorted(wanted)}


# the verification-cost curve's target dtypes
CURVE_DTYPES = ("float32", "bfloat16", "q4_1", "q4_1_bf16", "int8", "int8_bf16")
SAMPLING_TARGETS = ("q4_1", "q4_1_bf16")  # other targets sampling runs with, a row each


LONG_THREADS = 1  # the long-prompt rows' thread count: a one-core decode, where host work weighs most


def kept_configs(configs: list[Config], only: str | None) -> list[Config]:
    """The configs whose label holds one of `only`'s comma-separated substrings (None: all)."""
    return [c for c in configs if not only or any(s in c.label for s in only.split(","))]


def curve_and_calibration(pair, curve_dtypes, curve_reps: int, targets: dict, gamma: int, stored: Path, log=print):
    """The verification-cost curve over `curve_dtypes` at 1 thread and the current count, and the
    calibration read from it (both None without dtypes). The curve is kept in `stored` (JSON) and read
    back by a rerun of the same curve on the same machine: a resumed bench keeps the node budget its
    cells already ran at, and skips the curve's half hour."""
    if not curve_dtypes:
        return None, None
    threads = tuple(sorted({1, torch.get_num_threads()}))
    measures = {"machine": machine_key(), "dtypes": list(curve_dtypes), "threads": list(threads), "reps": curve_reps}
    kept = read_json(stored) if stored.exists() else {}
    if {k: kept.get(k) for k in measures} == measures:
        curve = curve_from_json(kept["curve"])
        log(f"curve read back from {stored} (measured on this machine by an earlier run of this bench)")
    else:
        curve = verification_curve(
            pair.target,
            pair.draft,
            curve_dtypes,
            threads=threads,
            reps=curve_reps,
            log=log,
            targets=tuple(targets.values()),
        )
        stored.parent.mkdir(parents=True, exist_ok=True)
        write_json(stored, {**measures, "curve": curve})
    calibrated = calibration(curve, gamma)
    if calibrated:
        log(f"calibration picked: {calibrated}")
    return curve, calibrated


def pair_path(pair) -> str:
    """The decode path the pair's methods resolve to on its target."""
    return resolve_decode_path(pair.decode_path, pair.target)
