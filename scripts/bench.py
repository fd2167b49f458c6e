"""`make bench`: our decoders against transformers' generate() and assisted generation.

    python scripts/bench.py [--pair smollm2_135m] [--prompts 3] [--max-new-tokens 48] [--reps 3]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from mtad.bench import decode_step_floor, default_configs, environment, measure_all, summarise, write_report
from mtad.models import load_pair
from mtad.models.prompts import chat_ids, make_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--target-dtype", default=None, help="override the pair's target dtype")
    ap.add_argument("--draft-dtype", default=None)
    ap.add_argument("--only", default=None, help="comma-separated substrings of config labels to run")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in (("target_dtype", args.target_dtype), ("draft_dtype", args.draft_dtype)) if v}
    pair = load_pair(args.pair, **overrides)
    prompts = [chat_ids(pair.tokenizer, text) for text in make_prompts(args.prompts, seed=7, held_out=True)]
    configs = default_configs(args.gamma)
    if args.only:
        configs = [c for c in configs if any(s in c.label for s in args.only.split(","))]
    # warm-up: one short run of each config so lazy initialisation is not timed
    measure_all(configs, pair.target, pair.draft, prompts[:1], 8, reps=1, log=lambda *_: None)
    results = measure_all(configs, pair.target, pair.draft, prompts, args.max_new_tokens, args.reps)
    payload = {"setup": {"pair": args.pair, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                         "reps": args.reps, "gamma": args.gamma},
               "environment": environment(pair.target, pair.draft), "rows": summarise(configs, results),
               "floor": decode_step_floor(pair.target), "notes": args.note}
    write_report(Path(args.out), payload)
    print((Path(args.out) / "bench.md").read_text())


if __name__ == "__main__":
    main()
