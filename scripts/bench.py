"""`make bench`: every method on the eager and fast decode paths, HF generate() (eager, and
static cache + compile) and assisted generation; compile times; the verification-cost curve.

    python scripts/bench.py [--pair smollm2_135m_head] [--prompts 2] [--max-new-tokens 48] [--reps 3]
    python scripts/bench.py --q4-tv 20 --max-new-tokens 32   # the q4_1 target's TV from float32 only
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from mtad.bench import (
    calibration,
    default_configs,
    environment,
    measure_all,
    predicted_sps_speedup,
    summarise,
    verification_curve,
    warm_up,
    write_report,
)
from mtad.decoding import SpSParams
from mtad.decoding.capabilities import reads_target_features
from mtad.models import load_pair
from mtad.tasks.prompts import chat_ids, make_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m_head")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gamma", type=int, default=SpSParams().gamma, help="draft length of every chain method")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's default)")
    ap.add_argument("--target-dtype", default=None, help="override the pair's target dtype")
    ap.add_argument("--draft-dtype", default=None)
    ap.add_argument("--only", default=None, help="comma-separated substrings of config labels to run")
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="add our compiled path for sampling and sps (about 2 min of compilation per shape on a 2-core CPU)",
    )
    ap.add_argument(
        "--curve-dtypes", default="float32,bfloat16", help="dtypes of the verification-cost curve ('' = skip)"
    )
    ap.add_argument(
        "--q4-tv",
        type=int,
        default=0,
        metavar="PROMPTS",
        help="only measure the q4_1 target's distance from the float32 one on this many held-out prompts "
        "(--max-new-tokens each; writes q4_tv.json and .md under --out)",
    )
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section")
    args = ap.parse_args()
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.q4_tv:
        from mtad.target_distance import q4_tv, write_q4_tv

        print(write_q4_tv(q4_tv(args.pair, args.q4_tv, args.max_new_tokens), args.out))
        return
    overrides = {k: v for k, v in (("target_dtype", args.target_dtype), ("draft_dtype", args.draft_dtype)) if v}
    pair = load_pair(args.pair, **overrides)
    prompts = [chat_ids(pair.tokenizer, text) for text in make_prompts(args.prompts, seed=7, held_out=True)]
    configs = default_configs(args.gamma, compiled=args.compiled, assisted=not reads_target_features(pair.draft))
    if args.only:
        configs = [c for c in configs if any(s in c.label for s in args.only.split(","))]
    warm = warm_up(configs, pair.target, pair.draft, prompts, 8, args.max_new_tokens)
    results = measure_all(configs, pair.target, pair.draft, prompts, args.max_new_tokens, args.reps)
    rows = summarise(configs, results)
    curve = None
    if args.curve_dtypes:
        curve = verification_curve(
            pair.target,
            pair.draft,
            tuple(args.curve_dtypes.split(",")),
            threads=tuple(sorted({1, torch.get_num_threads()})),
        )
    payload = {
        "setup": {
            "pair": args.pair,
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "reps": args.reps,
            "gamma": args.gamma,
            "threads": args.threads,
        },
        "environment": environment(pair.target, pair.draft),
        "rows": rows,
        "warm_up": warm,
        "curve": curve,
        "notes": args.note,
    }
    payload["calibration"] = calibration(curve, args.gamma) if curve else None
    payload["predicted"] = predictions(payload, args.gamma, str(pair.target.dtype).removeprefix("torch."))
    payload["wall_s"] = time.perf_counter() - started
    write_report(Path(args.out), payload)
    print((Path(args.out) / "bench.md").read_text())


def predictions(payload: dict, gamma: int, dtype: str) -> dict | None:
    """SpS speed-ups the measured fast-path forward costs predict, at fixed α and at the measured one."""
    curve = payload.get("curve")
    if not curve:
        return None
    threads = payload["environment"]["threads"]
    draft_dtype = payload["environment"]["draft_dtype"].removeprefix("torch.")

    def chosen(model: str, dt: str) -> dict | None:
        fast = [c for c in curve["curves"] if c["path"] == "fast" and c["threads"] == threads]
        return next((c for c in fast if c["model"] == model and c["dtype"] == dt), None)

    target, draft = chosen("target", dtype), chosen("draft", draft_dtype)
    ms = {int(k): v for k, v in target["ms"].items()} if target else {}
    if not (draft and gamma + 1 in ms):
        return None
    step, verify, draft_ms = ms[1], ms[gamma + 1], draft["ms"][1]
    out = {
        "dtype": dtype,
        "step_ms": step,
        "verify_ms": verify,
        "draft_ms": draft_ms,
        "by_alpha": {a: predicted_sps_speedup(a, gamma, draft_ms, step, verify) for a in (0.4, 0.6, 0.8)},
    }
    sps = next((r for r in payload["rows"] if r["label"] == "sps fast"), None)
    if sps and sps.get("acceptance_rate") is not None:
        alpha = measured_alpha(sps["block_efficiency"], gamma)
        out.update(
            measured_alpha=alpha,
            at_measured=predicted_sps_speedup(alpha, gamma, draft_ms, step, verify),
            measured=sps.get("speedup_vs_sampling"),
        )
    return out


def measured_alpha(block_efficiency: float, gamma: int) -> float:
    """The per-token α whose expected block efficiency (1 - α^(γ+1)) / (1 - α) is the measured one (bisection)."""
    lo, hi = 0.0, 0.999999
    for _ in range(60):
        mid = (lo + hi) / 2
        if (1 - mid ** (gamma + 1)) / (1 - mid) < block_efficiency:
            lo = mid
        else:
            hi = mid
    return lo


if __name__ == "__main__":
    main()
