"""Speed against the reference implementations (issue 7): our decoders beside Hugging Face's
`generate()` and assisted generation, on the same pair, prompts and token budget, in one
process, alternating runs, medians over repetitions; plus where the time goes and the
memory-bandwidth floor of one decode step on this machine.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mtad.decoding import get_decoder
from mtad.decoding.kv import CachedModel, model_device, sync
from mtad.metrics.speed import aggregate_speed


@dataclass
class Config:
    """One row of the benchmark: an implementation of a method at given settings."""
    label: str
    impl: str  # "ours" | "hf"
    method: str  # our decoder name; for hf: "sampling" (generate) or "sps" (assisted generation)
    params: dict = field(default_factory=dict)


@dataclass
class Measure:
    tokens: int = 0
    seconds: float = 0.0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    target_calls: int = 0
    accepted: int = 0
    drafted: int = 0


SAMPLED = {"temperature": 1.0, "top_k": 10, "top_p": 0.9}  # the paper's setting
GREEDY = {"temperature": 0}


def default_configs(gamma: int) -> list[Config]:
    chain = {"gamma": gamma}
    return [
        Config("sampling (sampled)", "ours", "sampling", SAMPLED),
        Config("HF generate (sampled)", "hf", "sampling", SAMPLED),
        Config("sampling (greedy)", "ours", "sampling", GREEDY),
        Config("HF generate (greedy)", "hf", "sampling", GREEDY),
        Config("sps (sampled)", "ours", "sps", {**chain, **SAMPLED}),
        Config("HF assisted (sampled)", "hf", "sps", {**chain, **SAMPLED}),
        Config("sps (greedy)", "ours", "sps", {**chain, **GREEDY}),
        Config("HF assisted (greedy)", "hf", "sps", {**chain, **GREEDY}),
        Config("spectr (sampled)", "ours", "spectr", {**chain, "num_drafts": 2, **SAMPLED}),
        Config("specinfer (sampled)", "ours", "specinfer", {"k_config": (2, 2, 1, 1), **SAMPLED}),
        Config("mtad (sampled)", "ours", "mtad", {**chain, "beam_width": 4, "threshold": 0.5, **SAMPLED}),
        Config("mmtad (sampled)", "ours", "mmtad", {**chain, "beam_width": 4, "threshold": 0.5, **SAMPLED}),
    ]


def run_ours(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> Measure:
    decoder = get_decoder(config.method, target=target, draft=draft, **config.params)
    sync(model_device(target))
    start = time.perf_counter()
    out = decoder.generate(prompt, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))
    sync(model_device(target))
    s = out.stats
    return Measure(len(out.tokens), time.perf_counter() - start, s.target_seconds, s.draft_seconds,
                   s.target_calls, s.accepted, s.drafted)


def run_hf(config: Config, target, draft, prompt: torch.Tensor, max_new_tokens: int, seed: int) -> Measure:
    """`generate()` with the same processing; for sps, assisted generation with a constant γ."""
    p = config.params
    kwargs = {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens,  # same length as ours (no EOS stop)
              "do_sample": p["temperature"] > 0, "pad_token_id": target.config.eos_token_id}
    if kwargs["do_sample"]:
        kwargs.update(temperature=p["temperature"], top_k=p["top_k"] or None, top_p=p["top_p"])
    if config.method == "sps":
        kwargs.update(assistant_model=draft)
        draft.generation_config.num_assistant_tokens = p["gamma"]
        draft.generation_config.num_assistant_tokens_schedule = "constant"  # fixed γ, not the dynamic schedule
        draft.generation_config.assistant_confidence_threshold = 0.0  # never stop drafting early
    torch.manual_seed(seed)
    sync(model_device(target))
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(prompt.to(target.device), attention_mask=torch.ones_like(prompt).to(target.device), **kwargs)
    sync(model_device(target))
    return Measure(out.shape[1] - prompt.shape[1], time.perf_counter() - start)


def measure_all(configs: list[Config], target, draft, prompts: list[torch.Tensor], max_new_tokens: int, reps: int,
                log=print) -> dict[str, list[Measure]]:
    """Alternate configs within each repetition (drift hits all alike); one Measure per rep."""
    results: dict[str, list[Measure]] = {c.label: [] for c in configs}
    for rep in range(reps):
        for config in configs:
            total = Measure()
            for i, prompt in enumerate(prompts):
                runner = run_ours if config.impl == "ours" else run_hf
                m = runner(config, target, draft, prompt, max_new_tokens, seed=1000 * rep + i)
                for key in vars(total):
                    setattr(total, key, getattr(total, key) + getattr(m, key))
            results[config.label].append(total)
            log(f"rep {rep} {config.label:24s} {total.tokens / total.seconds:7.2f} tok/s")
    return results


def summarise(configs: list[Config], results: dict[str, list[Measure]]) -> list[dict]:
    rows = []
    for c in configs:
        ms = results[c.label]
        tps = statistics.median(m.tokens / m.seconds for m in ms)
        row = {"label": c.label, "impl": c.impl, "method": c.method, "params": c.params, "tokens_per_s": tps,
               "tokens_per_s_reps": [m.tokens / m.seconds for m in ms]}
        if c.impl == "ours":
            m = ms[len(ms) // 2]
            speed = aggregate_speed([{"new_tokens": m.tokens, "seconds": m.seconds, "target_calls": m.target_calls,
                                      "accepted": m.accepted, "drafted": m.drafted}])  # the runner's totals
            row.update(target_frac=m.target_seconds / m.seconds, draft_frac=m.draft_seconds / m.seconds,
                       other_frac=1 - (m.target_seconds + m.draft_seconds) / m.seconds,
                       block_efficiency=speed["block_efficiency"], acceptance_rate=speed["acceptance_rate"],
                       ms_per_token=1000 * m.seconds / m.tokens)
        rows.append(row)
    by_label = {r["label"]: r for r in rows}
    for ours, ref in (("sampling (sampled)", "HF generate (sampled)"), ("sampling (greedy)", "HF generate (greedy)"),
                      ("sps (sampled)", "HF assisted (sampled)"), ("sps (greedy)", "HF assisted (greedy)")):
        if ours in by_label and ref in by_label:
            by_label[ours]["ratio_vs_hf"] = by_label[ours]["tokens_per_s"] / by_label[ref]["tokens_per_s"]
    base = by_label.get("sampling (sampled)")
    for r in rows:
        if base and r["impl"] == "ours":
            r["speedup_vs_sampling"] = r["tokens_per_s"] / base["tokens_per_s"]
    return rows


@torch.inference_mode()
def decode_step_floor(target, context: int = 128, reps: int = 20) -> dict:
    """Time of one single-token target forward on a `context`-token cache, the weight bytes,
    and the machine's copy bandwidth: bytes / bandwidth is the floor of a decode step."""
    lm = CachedModel(target)
    lm.prefill(torch.randint(0, target.config.vocab_size, (context,)))
    token = torch.tensor([1])
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        lm.extend(token)
        sync(model_device(target))
        times.append(time.perf_counter() - start)
        lm.crop(context)
    weight_bytes = sum(p.numel() * p.element_size() for p in target.parameters())
    bandwidth = copy_bandwidth(next(target.parameters()).device)
    return {"context": context, "forward_ms_median": 1000 * statistics.median(times), "weight_bytes": weight_bytes,
            "copy_bandwidth_gb_s": bandwidth / 1e9, "floor_ms": 1000 * weight_bytes / bandwidth}


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


def environment(target, draft) -> dict:
    from mtad.runner.provenance import environment_record

    env = environment_record(models=(target, draft))  # the runner's record: machine, versions, code state
    return {**env, "cpu_count": env["torch_threads"], "torch": env["versions"]["torch"],
            "transformers": env["versions"]["transformers"], "target_dtype": str(target.dtype),
            "draft_dtype": str(draft.dtype), "device": str(next(target.parameters()).device),
            "cuda": env["gpus"][0] if env["gpus"] else None}


def write_report(out_dir: Path, payload: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(payload, indent=2))
    env, setup, floor = payload["environment"], payload["setup"], payload["floor"]
    lines = [
        "# Speed against the Hugging Face references", "",
        f"Pair `{setup['pair']}`, {setup['prompts']} prompts x {setup['max_new_tokens']} new tokens, "
        f"{setup['reps']} alternating repetitions (median), γ = {setup['gamma']}. Machine: {env['platform']}, "
        f"{env['cpu_count']} torch threads, device {env['device']}, target {env['target_dtype']}, draft {env['draft_dtype']}, "
        f"torch {env['torch']}, transformers {env['transformers']}.", "",
        "| method | impl | tokens/s | ours / HF | speed-up vs sampling | block eff. | acceptance | target % | draft % | other % |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fmt = lambda v, f="{:.2f}": "" if v is None else f.format(v)
    for r in payload["rows"]:
        lines.append(f"| {r['label']} | {r['impl']} | {r['tokens_per_s']:.2f} | {fmt(r.get('ratio_vs_hf'))} | "
                     f"{fmt(r.get('speedup_vs_sampling'))} | {fmt(r.get('block_efficiency'))} | {fmt(r.get('acceptance_rate'))} | "
                     f"{fmt(r.get('target_frac') and 100 * r['target_frac'], '{:.0f}')} | "
                     f"{fmt(r.get('draft_frac') is not None and 100 * r['draft_frac'] or None, '{:.0f}')} | "
                     f"{fmt(r.get('other_frac') is not None and 100 * r['other_frac'] or None, '{:.1f}')} |")
    lines += ["", f"Decode-step floor: one single-token target forward on a {floor['context']}-token cache takes "
              f"{floor['forward_ms_median']:.1f} ms; the target's weights are {floor['weight_bytes'] / 1e6:.0f} MB and a "
              f"large copy runs at {floor['copy_bandwidth_gb_s']:.1f} GB/s, so reading them once costs at least "
              f"{floor['floor_ms']:.1f} ms ({1000 / floor['floor_ms']:.0f} tokens/s for one-token-per-step decoding).", ""]
    if payload.get("notes"):
        lines += ["## Notes", "", *payload["notes"], ""]
    (out_dir / "bench.md").write_text("\n".join(lines))
