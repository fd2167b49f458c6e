"""Timing the decoders against the reference implementations: the configurations measured (`Config`:
every method on the eager and fast paths, HF generate() eager and with static cache + compile,
assisted generation, sampling with other targets; `default_configs`, `method_params`), one timed
generation (`run_ours`, `run_hf`, `run`), the warm-up calls that time compilation (`warm_up`), the
alternating timed repetitions (`measure_all`) and their medians (`summarise`), the machine
(`environment`), and the whole benchmark of one pair (`measure_pair`).

A timed generation is the decoders' own record, `DecodeStats`: ours as `Decoder.generate` fills it,
HF's with what `generate()` lets us see (new tokens, prompt tokens, seconds). A row's totals are
the runner's cell totals of its records (`aggregate_speed`), and the cost model reads them and each
generation's record as it reads a cell's (`mtad.metrics.cost_model.Counts.of`)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch

from mtad.bench.block_profile import long_prompt_ids
from mtad.bench.calibrate import calibration, predictions
from mtad.bench.curves import verification_curve
from mtad.bench.llama_cpp import llama_cpp_on_pair
from mtad.bench.rows import find_row
from mtad.decode_stats import COUNTS, DecodeStats, host_seconds
from mtad.decoding import DecoderParams, SpecInferParams
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.registry import REFERENCE, VANILLA, specs
from mtad.decoding.static_kv import kernel_record, resolve_decode_path
from mtad.devices import model_device, sync, torch_threads
from mtad.generation import build_decoder, timed_generate
from mtad.metrics.speed import aggregate_speed
from mtad.models import load_pair
from mtad.models.pairs import QUANTIZED_DTYPES, auto_dtype, auto_meaning, cpu_flags, load_target_and_tokenizer
from mtad.provenance import dtype_name
from mtad.records import derive_seed
from mtad.tasks.prompts import chat_ids, make_prompts


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


def run_ours(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> DecodeStats:
    """One generation's record as the decoder fills it, timed whole (`generation.timed_generate`), as
    HF's `generate()` is: its cache set-up included (the host work of the record then includes it)."""
    decoder = build_decoder(config.method, target, draft, config.path, config.params)
    out, _ = timed_generate(decoder, prompt, max_new_tokens, torch.Generator().manual_seed(seed))
    return out.stats


def run_hf(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> DecodeStats:
    """`generate()` with the same processing; for sps, assisted generation with a constant γ;
    "static+compile": HF's static cache with its own torch.compile of the decode step. Its record
    holds what `generate()` lets us see: new tokens, prompt tokens and the call's seconds."""
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
    if config.method == VANILLA:
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
    seconds = time.perf_counter() - start
    return DecodeStats(new_tokens=out.shape[1] - prompt.shape[1], prompt_tokens=prompt.shape[1], seconds=seconds)


def run(config: Config, target, *args, targets: dict | None = None, **kwargs) -> DecodeStats:
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
    seed: int = 0,
) -> dict[str, list[Repetition]]:
    """Alternate configs on each prompt of each repetition, so that the generations compared run
    seconds apart (a shared machine drifts by tens of percent over minutes); per config, one list of
    records per repetition, one record per prompt. Prompt i of repetition `rep` samples from seed
    `derive_seed(seed, str(i), rep)`, as the runner seeds sample `rep` of example `i`: the same in
    every config."""
    results: dict[str, list[Repetition]] = {c.label: [] for c in configs}
    for rep in range(reps):
        for config in configs:
            results[config.label].append([])
        for i, prompt in enumerate(prompts):
            for config in configs:
                stats = run(
                    config, target, draft, prompt, max_new_tokens, seed=derive_seed(seed, str(i), rep), targets=targets
                )
                results[config.label][rep].append(stats)
        for config in configs:
            log(f"rep {rep} {config.label:28s} {totals(results[config.label][rep])['tokens_per_s']:7.2f} tok/s")
    return results


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


def measure_long(
    configs: list[Config], target, draft, prompts: list[torch.Tensor], max_new_tokens: int, reps: int, log=print
) -> dict:
    """`configs` (our fast-path rows) again on long prompts at `LONG_THREADS` thread: the setup and the
    rows `summarise` makes of them, each method beside sampling on the same prompts."""
    with torch_threads(LONG_THREADS):
        warm_up(configs, target, draft, prompts, 8, max_new_tokens, log=lambda *_: None)
        results = measure_all(configs, target, draft, prompts, max_new_tokens, reps, log=log)
    return {
        "prompts": len(prompts),
        "mean_prompt_tokens": statistics.mean(p.numel() for p in prompts),
        "threads": LONG_THREADS,
        "rows": summarise(configs, results),
    }


def kept_configs(configs: list[Config], only: str | None) -> list[Config]:
    """The configs whose label holds one of `only`'s comma-separated substrings (None: all)."""
    return [c for c in configs if not only or any(s in c.label for s in only.split(","))]


def curve_and_calibration(pair, curve_dtypes, curve_reps: int, targets: dict, gamma: int, log=print):
    """The verification-cost curve over `curve_dtypes` at 1 thread and the current count, and the
    calibration read from it (both None without dtypes)."""
    if not curve_dtypes:
        return None, None
    curve = verification_curve(
        pair.target,
        pair.draft,
        curve_dtypes,
        threads=tuple(sorted({1, torch.get_num_threads()})),
        reps=curve_reps,
        log=log,
        targets=tuple(targets.values()),
    )
    calibrated = calibration(curve, gamma)
    if calibrated:
        log(f"calibration picked: {calibrated}")
    return curve, calibrated


def long_rows(configs: list[Config], pair, long_prompts: int, max_new_tokens: int, reps: int, log=print):
    """Our fast-path rows again on `long_prompts` CNN/DailyMail prompts (None for 0)."""
    if not long_prompts:
        return None
    ours = [c for c in configs if c.impl == "ours" and c.path == "fast" and not c.target_dtype]
    long_ids = long_prompt_ids(pair.tokenizer, long_prompts)
    return measure_long(ours, pair.target, pair.draft, long_ids, max_new_tokens, reps, log=log)


def measure_pair(
    pair_name: str,
    *,
    prompts: int,
    max_new_tokens: int,
    reps: int,
    gamma: int,
    threads: int,
    target_dtype: str | None,
    draft_dtype: str | None,
    only: str | None,
    compiled: bool,
    curve_dtypes: tuple[str, ...],
    curve_reps: int,
    sampling_targets: tuple[str, ...],
    llama_cpp: bool,
    long_prompts: int,
    notes: list[str],
    log=print,
) -> dict:
    """The whole benchmark of pair `pair_name` -> the payload `write_report` renders: the curve over
    `curve_dtypes` and its calibration (`curve_and_calibration`); `prompts` held-out chat prompts x
    `max_new_tokens`, `reps` alternating repetitions of every config (`default_configs`, `budget_configs`
    at the calibrated node budget, sampling on each of `sampling_targets`; `only`: label substrings to
    keep), llama.cpp on the pair's GGUF, the fast-path rows on `long_prompts` CNN/DailyMail prompts
    (`long_rows`), the predicted speed-ups and the wall time. `threads` (0: torch's default) holds for
    the whole run; `target_dtype`, `draft_dtype` override the pair's. Defaults: scripts/bench.py's."""
    with torch_threads(threads):
        started = time.perf_counter()
        overrides = {k: v for k, v in (("target_dtype", target_dtype), ("draft_dtype", draft_dtype)) if v}
        pair = load_pair(pair_name, **overrides)
        prompt_ids = [chat_ids(pair.tokenizer, text) for text in make_prompts(prompts, seed=7, held_out=True)]
        own = dtype_name(pair.target)
        sampling_targets = tuple(d for d in sampling_targets if d != own)
        assisted = not reads_target_features(pair.draft)
        configs = kept_configs(
            default_configs(gamma, compiled, assisted, target_dtypes=sampling_targets, pair_dtype=own), only
        )
        targets = other_targets(pair, {*curve_dtypes, *(c.target_dtype for c in configs if c.target_dtype)})
        curve, calibrated = curve_and_calibration(pair, curve_dtypes, curve_reps, targets, gamma, log)
        if calibrated and calibrated.get("node_budget"):
            configs += kept_configs(budget_configs(gamma, calibrated["node_budget"]["nodes"]), only)
        warm = warm_up(configs, pair.target, pair.draft, prompt_ids, 8, max_new_tokens, log=log, targets=targets)
        results = measure_all(
            configs, pair.target, pair.draft, prompt_ids, max_new_tokens, reps, log=log, targets=targets
        )
        setup = {"pair": pair_name, "prompts": len(prompt_ids), "max_new_tokens": max_new_tokens, "reps": reps}
        setup |= {"gamma": gamma, "threads": threads, "default_path": pair_path(pair)}
        payload = {
            "setup": setup,
            "environment": environment(pair.target, pair.draft, pair.config),
            "rows": summarise(configs, results),
            "warm_up": warm,
            "curve": curve,
            "llama_cpp": llama_cpp_on_pair(pair, prompt_ids, max_new_tokens, reps, skip=not llama_cpp, only=only),
            "long": long_rows(configs, pair, long_prompts, max_new_tokens, reps, log),
            "notes": list(notes),
            "calibration": calibrated,
        }
        return payload | {"predicted": predictions(payload, gamma, own), "wall_s": time.perf_counter() - started}


def pair_path(pair) -> str:
    """The decode path the pair's methods resolve to on its target."""
    return resolve_decode_path(pair.decode_path, pair.target)
