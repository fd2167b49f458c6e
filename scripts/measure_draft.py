#!/usr/bin/env python
"""Benchmark a pair's draft on held-out chat prompts (never used for training), gamma = 4.

1. Distribution match on target-written answers (teacher-forced, full vocabulary):
   greedy argmax agreement, mean total-variation distance TV(p, q), and the per-token SpS
   acceptance sum_x min(p', q') at temperature 1 and at top-k 10 / top-p 0.9.
2. Decoding: `sampling` and `sps` (gamma 4) at temperature 1 and at the paper's setting,
   interleaved prompt by prompt (so load from other processes hits both alike); for each
   method the fastest dtype combination found on a short sweep is used.
Writes results/draft/measure.json and measure.md.

    python scripts/measure_draft.py --pair smollm2_135m --prompts 12 --max-new-tokens 64
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from mtad.metrics.speed import aggregate_speed
from mtad.models.prompts import chat_ids
from mtad.runner.provenance import environment_record

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"t1": {"temperature": 1.0, "top_k": 0, "top_p": 1.0}, "paper": {"temperature": 1.0, "top_k": 10, "top_p": 0.9}}


@torch.no_grad()
def distribution_match(pair, prompts: list[str], max_new_tokens: int, seed: int) -> dict:
    """Teacher-forced comparison of p and q on answers the target samples (temperature 1)."""
    from mtad.models.distill import pair_stats

    sums, count = {}, 0
    torch.manual_seed(seed)
    for prompt in prompts:
        ids = chat_ids(pair.tokenizer, prompt)
        seq = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                                   temperature=1.0, max_new_tokens=max_new_tokens, pad_token_id=pair.eos_token_id)
        P = ids.shape[1]
        p_logits = pair.target(seq).logits[0, P - 1:-1].float()  # [n, V] predicting the answer tokens
        q_logits = pair.draft(seq).logits[0, P - 1:-1].float()
        stats = pair_stats(p_logits, q_logits)
        stats["tv"] = 0.5 * (p_logits.softmax(-1) - q_logits.softmax(-1)).abs().sum(-1)
        for key, val in stats.items():
            sums[key] = sums.get(key, 0.0) + float(val.sum())
        count += p_logits.shape[0]
    out = {k: v / count for k, v in sums.items()}
    return {"positions": count, "argmax_agreement": out["argmax_agree"], "mean_tv": out["tv"],
            "expected_accept_t1": out["accept_t1"], "expected_accept_paper": out["accept_paper"]}


def run_decoder(method: str, target, draft, ids, params: dict, max_new_tokens: int, eos: int, seed: int):
    from mtad.decoding import get_decoder

    kwargs = dict(params)
    if method == "sps":
        kwargs["gamma"] = 4
    dec = get_decoder(method, target=target, draft=draft if method == "sps" else None, **kwargs)
    return dec.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos,
                        generator=torch.Generator().manual_seed(seed)).stats


def alpha_from_accept_lengths(mean_accepted: float, gamma: int = 4) -> float | None:
    """Per-token acceptance probability alpha with sum_{i=1..gamma} alpha^i = mean accepted length
    (Leviathan et al.'s i.i.d. model); accepted/drafted alone understates alpha because drafting
    stops at the first rejection."""
    if mean_accepted <= 0:
        return 0.0
    if mean_accepted >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(1, gamma + 1)) < mean_accepted else (lo, mid)
    return (lo + hi) / 2


def totals(stats: list) -> dict:
    t = aggregate_speed(s.as_dict() for s in stats)  # the runner's totals and ratios
    mean_accepted = t["mean_accept_length"]
    return {"new_tokens": t["new_tokens"], "seconds": round(t["decode_seconds"], 3),
            "tokens_per_s": t["tokens_per_s"] or 0.0, "target_calls": t["target_calls"],
            "block_efficiency": t["block_efficiency"] or 0.0, "acceptance_rate": t["acceptance_rate"],
            "mean_accepted_per_iteration": mean_accepted,
            "alpha": alpha_from_accept_lengths(mean_accepted) if mean_accepted is not None else None,
            "samples": len(stats)}


def cast(model, dtype: str):
    return model.to({"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])


def decode_sweep(pair, prompts, dtype_combos, max_new_tokens, seed) -> dict:
    """For every (method, setting, dtypes) combination: totals over `prompts`, interleaved."""
    rows = {}
    for setting, params in SETTINGS.items():
        for i, prompt in enumerate(prompts):
            ids = chat_ids(pair.tokenizer, prompt)
            for method, t_dtype, d_dtype in dtype_combos:
                cast(pair.target, t_dtype), cast(pair.draft, d_dtype)
                stats = run_decoder(method, pair.target, pair.draft, ids, params, max_new_tokens, pair.eos_token_id, seed + i)
                rows.setdefault((method, setting, t_dtype, d_dtype), []).append(stats)
    return rows


def write_markdown(result: dict, path: Path) -> None:
    dm, lines = result["distribution"], []
    lines += [f"# Draft measurement: {result['pair']}", "",
              f"Draft file `{result['draft_file']}` ({result['draft_meta_summary']}). Held-out prompts: "
              f"{result['n_prompts']} (topics never used in training), max {result['max_new_tokens']} new tokens, "
              f"gamma = 4, seed {result['seed']}. Machine: {result['machine']}, torch threads {result['threads']}, "
              f"load average at the end {result['load_average_1_5_15min_at_end']} (shared machine).", "",
              "## Distribution match (teacher-forced on target samples)", "",
              "| positions | argmax agreement | mean TV(p, q) | E[accept] T=1 | E[accept] top-k 10 / top-p 0.9 |",
              "|---|---|---|---|---|",
              f"| {dm['positions']} | {dm['argmax_agreement']:.3f} | {dm['mean_tv']:.3f} | {dm['expected_accept_t1']:.3f} | {dm['expected_accept_paper']:.3f} |",
              "", "## Decoding (fastest dtypes per method)", "",
              "| setting | method | target dtype | draft dtype | tokens/s | speed-up vs sampling | acceptance rate (accepted/drafted) | alpha (per token) | block efficiency |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in result["decoding"]:
        acc = "—" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.3f}"
        alpha = "—" if row["alpha"] is None else f"{row['alpha']:.3f}"
        lines.append(f"| {row['setting']} | {row['method']} | {row['target_dtype']} | {row['draft_dtype'] or '—'} | "
                     f"{row['tokens_per_s']:.1f} | {row['speedup']:.2f}x | {acc} | {alpha} | {row['block_efficiency']:.2f} |")
    lines += ["", "## dtype sweep (first prompts only)", "",
              "| setting | method | target | draft | tokens/s |", "|---|---|---|---|---|"]
    for row in result["dtype_sweep"]:
        lines.append(f"| {row['setting']} | {row['method']} | {row['target_dtype']} | {row['draft_dtype'] or '—'} | {row['tokens_per_s']:.1f} |")
    lines += ["", "acceptance rate = accepted / drafted draft tokens (gamma per iteration, the engine's statistic); "
              "alpha = the per-token acceptance probability that gives the observed mean accepted length "
              "(sum_{i<=4} alpha^i), comparable to E[accept] = sum_x min(p', q') above.", "",
              "Speed is measured on a shared machine; methods are interleaved prompt by prompt so that "
              "load from other processes affects them alike. Settings: t1 = temperature 1, no truncation; "
              "paper = temperature 1, top-k 10, top-p 0.9."]
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    from mtad.models import load_pair
    from mtad.models.draft import read_draft_meta
    from mtad.models.pairs import ASSETS_DIR
    from mtad.models.prompts import make_prompts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m")
    ap.add_argument("--draft-file", default=None, help="measure this draft file instead of the pair's")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--sweep-prompts", type=int, default=3, help="prompts for the dtype sweep")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("MTAD_THREADS", "1")))
    ap.add_argument("--dtypes", default="float32,bfloat16", help="target dtypes to try")
    ap.add_argument("--draft-dtypes", default="float32,bfloat16", help="draft dtypes to try (sps)")
    ap.add_argument("--out", default=str(ROOT / "results" / "draft"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    pair = load_pair(args.pair, draft_file=args.draft_file, device="cpu")
    draft_file = args.draft_file or str(ASSETS_DIR / pair.config["draft"]["file"])
    meta = read_draft_meta(draft_file)
    prompts = make_prompts(args.prompts, seed=args.seed, held_out=True)
    t0 = time.time()
    dist = distribution_match(pair, prompts, args.max_new_tokens, args.seed)
    print("distribution", json.dumps(dist), f"{time.time() - t0:.0f}s", flush=True)

    dtypes = args.dtypes.split(",")
    draft_dtypes = args.draft_dtypes.split(",")
    combos = [("sampling", t, None) for t in dtypes] + [("sps", t, d) for t in dtypes for d in draft_dtypes]
    sweep = decode_sweep(pair, prompts[: args.sweep_prompts], [(m, t, d or "float32") for m, t, d in combos],
                         args.max_new_tokens, args.seed)
    sweep_rows = [{"method": m, "setting": s, "target_dtype": t, "draft_dtype": d if m == "sps" else None} | totals(v)
                  for (m, s, t, d), v in sweep.items()]
    print("sweep", json.dumps(sweep_rows), flush=True)
    best = {}
    for method in ("sampling", "sps"):  # fastest dtypes per method, summed over both settings
        speed = {}
        for row in sweep_rows:
            if row["method"] == method:
                speed.setdefault((row["target_dtype"], row["draft_dtype"] or "float32"), []).append(row["tokens_per_s"])
        best[method] = max(speed, key=lambda k: statistics.mean(speed[k]))
    final = decode_sweep(pair, prompts, [(m, *best[m]) for m in ("sampling", "sps")], args.max_new_tokens, args.seed + 7)
    decoding = []
    for setting in SETTINGS:
        base = totals(final[("sampling", setting, *best["sampling"])])
        for method in ("sampling", "sps"):
            row = totals(final[(method, setting, *best[method])])
            decoding.append({"setting": setting, "method": method, "target_dtype": best[method][0],
                             "draft_dtype": best[method][1] if method == "sps" else None,
                             "speedup": row["tokens_per_s"] / base["tokens_per_s"]} | row)
    result = {
        "pair": pair.name, "draft_file": os.path.relpath(draft_file, ROOT),
        "draft_meta": {k: v for k, v in meta.items() if k != "head_token_ids"} | {
            "head_size": len(meta["head_token_ids"]) if meta["head_token_ids"] else None},
        "draft_meta_summary": f"layers {meta['source_layers']}, head "
                              f"{len(meta['head_token_ids']) if meta['head_token_ids'] else 'full'}, "
                              f"{meta.get('trained_tokens', '?')} training tokens",
        "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "gamma": 4, "seed": args.seed,
        "settings": SETTINGS, "distribution": dist, "dtype_sweep": sweep_rows, "decoding": decoding,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "threads": args.threads,
        "torch": torch.__version__, "git_commit": environment_record()["git"]["commit"] or "unknown",
        "environment": environment_record(models=(pair.target, pair.draft)), "wall_seconds": round(time.time() - t0, 1),
        "load_average_1_5_15min_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result, out / "measure.md")
    print((out / "measure.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
