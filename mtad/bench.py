"""Speed of our decoders on their decode paths against the reference implementations.

Every method on the eager path (the model's own forward, DynamicCache) and the fast one
(static KV cache, lean forward; static_kv.py), beside Hugging Face's `generate()` (eager, and
with its static cache + torch.compile) and assisted generation: the same pair, prompts and
token budget, in one process, alternating runs, medians over repetitions. Compilation is
timed on the warm-up call and reported apart from tokens/s. Then the cost of verifying
1, 2, 3, 5, 9 tokens in one target forward per dtype and path, against the floor of a decode
step (weight bytes / measured copy bandwidth), and the speed-ups those costs predict.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

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
from mtad.decoding.static_kv import cached_model
from mtad.metrics.speed import aggregate_speed


@dataclass
class Config:
    """One row of the benchmark: an implementation of a method at given settings on one path."""

    label: str
    impl: str  # "ours" | "hf"
    method: str  # our decoder name; for hf: "sampling" (generate) or "sps" (assisted generation)
    params: DecoderParams  # the method's settings (for hf: those of `method`)
    path: str = "eager"  # ours: a decode_path; hf: "eager" | "static+compile"


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


def default_configs(gamma: int, compiled: bool = False, assisted: bool = True) -> list[Config]:
    """Every method on both paths; HF generate eager and static+compile; assisted generation
    (`assisted`: a feature head is no model `generate()` can assist with); optionally our compiled
    path for sampling and sps (it does not win on a CPU, so `fast` is the static path there)."""
    params = method_params(gamma)
    configs = [
        Config("HF generate", "hf", "sampling", params["sampling"], "eager"),
        Config("HF generate static+compile", "hf", "sampling", params["sampling"], "static+compile"),
    ]
    if assisted:
        configs.append(Config("HF assisted", "hf", "sps", params["sps"], "eager"))
    for method, p in params.items():
        configs += [Config(f"{method} {path}", "ours", method, p, path) for path in PATHS]
        if compiled and method in ("sampling", "sps"):
            configs.append(Config(f"{method} compiled", "ours", method, p, "compiled"))
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


def run(config: Config, *args, **kwargs) -> Measure:
    return (run_ours if config.impl == "ours" else run_hf)(config, *args, **kwargs)


def warm_up(
    configs: list[Config], target, draft, prompts: list[torch.Tensor], tokens: int, max_new_tokens: int, log=print
) -> dict[str, dict]:
    """Runs before timing (lazy initialisation, compilation); their wall time and the compilations they
    triggered are kept: compile time = first call - a second identical call. Compiled configs warm up
    on every prompt at the timed length (HF's static cache is sized prompt + new tokens, a shape)."""
    out = {}
    for config in configs:
        compiled = "compile" in config.path
        runs = [(p, max_new_tokens) for p in prompts] if compiled else [(prompts[0], tokens)]
        first = [run(config, target, draft, p, n, seed=0) for p, n in runs]
        second = run(config, target, draft, *runs[0], seed=0)
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
    configs: list[Config], target, draft, prompts: list[torch.Tensor], max_new_tokens: int, reps: int, log=print
) -> dict[str, list[Measure]]:
    """Alternate configs within each repetition (drift hits all alike); one Measure per rep."""
    results: dict[str, list[Measure]] = {c.label: [] for c in configs}
    for rep in range(reps):
        for config in configs:
            total = Measure()
            for i, prompt in enumerate(prompts):
                m = run(config, target, draft, prompt, max_new_tokens, seed=1000 * rep + i)
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
        eager = by_label.get(f"{r['method']} eager")
        base = by_label.get(f"sampling {r['path']}")
        if eager:
            r["vs_eager"] = r["tokens_per_s"] / eager["tokens_per_s"]
        if base:
            r["speedup_vs_sampling"] = r["tokens_per_s"] / base["tokens_per_s"]
        ref = {"sampling": ["HF generate", "HF generate static+compile"], "sps": ["HF assisted"]}.get(r["method"], [])
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


def verification_curve(
    target,
    draft,
    dtypes: tuple[str, ...] = ("float32", "bfloat16"),
    threads: tuple[int, ...] = (1, 2),
    widths: tuple[int, ...] = (1, 2, 3, 5, 9),
    context: int = 200,
    reps: int = 10,
    log=print,
) -> dict:
    """ms per target forward of each width, per dtype: on the eager path at the current thread
    count, on the fast path at each count in `threads` (the calibration of dtype and threads);
    the draft's 1-token step per dtype and thread count; the bandwidth floor of a 1-token step."""
    bandwidth = copy_bandwidth(model_device(target))
    current = torch.get_num_threads()
    curves = []

    def as_dtype(model, dtype):
        return model if str(model.dtype) == f"torch.{dtype}" else copy.deepcopy(model).to(getattr(torch, dtype))

    try:
        for dtype in dtypes:
            model, small = as_dtype(target, dtype), as_dtype(draft, dtype)
            floor, draft_floor = 1000 * weight_bytes(model) / bandwidth, 1000 * weight_bytes(small) / bandwidth
            for path, counts in (("eager", (current,)), ("fast", threads)):
                for n_threads in counts:
                    torch.set_num_threads(n_threads)
                    ms = {w: forward_ms(model, path, w, context, reps) for w in widths}
                    curves.append(
                        {
                            "model": "target",
                            "dtype": dtype,
                            "path": path,
                            "threads": n_threads,
                            "ms": ms,
                            "floor_ms": floor,
                        }
                    )
                    draft_ms = {w: forward_ms(small, path, w, context, reps, target=model) for w in (1, 4)}
                    curves.append(
                        {
                            "model": "draft",
                            "dtype": dtype,
                            "path": path,
                            "threads": n_threads,
                            "ms": draft_ms,
                            "floor_ms": draft_floor,
                        }
                    )
                    log(
                        f"curve {dtype} {path} {n_threads} threads: target "
                        + ", ".join(f"{w}: {v:.1f}" for w, v in ms.items())
                        + f" ms (floor {floor:.1f}); draft 1: {draft_ms[1]:.1f}, 4: {draft_ms[4]:.1f} ms"
                    )
    finally:
        torch.set_num_threads(current)
    return {"context": context, "copy_bandwidth_gb_s": bandwidth / 1e9, "curves": curves}


def calibration(curve: dict, gamma: int) -> dict:
    """Per model, the (dtype, threads) of the fast path with the cheapest 1-token step and, for
    the target, the cheapest (γ+1)-token verification (what speculative methods pay)."""
    fast = [c for c in curve["curves"] if c["path"] == "fast"]

    def pick(model: str, width: int) -> dict:
        return min((c for c in fast if c["model"] == model and width in c["ms"]), key=lambda c: c["ms"][width])

    out = {}
    for key, model, width in (
        ("target_step", "target", 1),
        ("target_verify", "target", gamma + 1),
        ("draft_step", "draft", 1),
    ):
        best = pick(model, width)
        out[key] = {"dtype": best["dtype"], "threads": best["threads"], "ms": best["ms"][width], "width": width}
    return out


def predicted_sps_speedup(alpha: float, gamma: int, draft_ms: float, step_ms: float, verify_ms: float) -> float:
    """Expected SpS tokens/s over sampling at per-token acceptance α (Leviathan et al.): block
    efficiency (1 - α^(γ+1)) / (1 - α) per iteration of γ draft steps and one (γ+1)-token verification."""
    block = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return block * step_ms / (gamma * draft_ms + verify_ms)


def environment(target, draft) -> dict:
    from mtad.runner.provenance import environment_record

    flags = ""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
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
        "amx": " amx_bf16" in flags,
        "avx512_bf16": " avx512_bf16" in flags,
        "cuda": env["gpus"][0] if env["gpus"] else None,
    }


# ------------------------------------------------------------------ report


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "" if value is None else pattern.format(value)


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
    if payload.get("calibration"):
        cal = payload["calibration"]
        lines += [
            "",
            "Calibration (fast path, cheapest per model and work): "
            + "; ".join(
                f"{k.replace('_', ' ')} ({v['width']} tok): {v['dtype']}, {v['threads']} threads, {v['ms']:.1f} ms"
                for k, v in cal.items()
            )
            + ".",
        ]
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
    if payload.get("notes"):
        lines += ["", "## Notes", "", *payload["notes"]]
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")
