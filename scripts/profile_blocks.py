#!/usr/bin/env python
"""`make profile`: where one decoding block's time goes, for every method on the fast path, at one
and two threads, on short (held-out chat, ~50 tokens) and long (CNN/DailyMail articles, 400-1,000
tokens) prompts -> the `profile` section of bench.json and profile.md under --out (`profile_adaptive`
with --adaptive; mtad/bench/block_profile.py).
Time it on a quiet machine: nothing else running.

    python scripts/profile_blocks.py [--pair smollm2_135m_head] [--prompts 3] [--max-new-tokens 40]
    python scripts/profile_blocks.py --adaptive     # the methods with adaptive drafting on (the bench's thresholds)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mtad.bench.block_profile import long_prompt_ids, profile_methods, write_profile
from mtad.bench.timings import method_params
from mtad.decoding.registry import specs
from mtad.models.pairs import load_pair
from mtad.provenance import capture, dtype_name, environment_record
from mtad.tasks.prompts import chat_ids, make_prompts

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m_head")
    ap.add_argument("--prompts", type=int, default=3, help="prompts per length group")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive drafting on, at each method's threshold (its MethodSpec.adaptive_stop)",
    )
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    args = ap.parse_args(argv)
    capture()  # the code this run starts from, whatever the checkout becomes while it runs
    started = time.perf_counter()
    pair = load_pair(args.pair)
    prompts = {
        "short": [chat_ids(pair.tokenizer, t) for t in make_prompts(args.prompts, seed=7, held_out=True)],
        "long": long_prompt_ids(pair.tokenizer, args.prompts),
    }
    methods = {m: vars(p) for m, p in method_params(gamma=4).items()}
    if args.adaptive:
        stops = {m: s.adaptive_stop for m, s in specs().items() if s.adaptive_stop is not None}
        methods = {m: p | ({"stop_below": stops[m]} if m in stops else {}) for m, p in methods.items()}
    threads = tuple(int(n) for n in args.threads.split(","))
    rows = profile_methods(pair.target, pair.draft, prompts, methods, threads, args.max_new_tokens)
    env = environment_record([pair.target, pair.draft])
    payload = {
        "setup": {
            "pair": args.pair,
            "prompts_per_group": args.prompts,
            "max_new_tokens": args.max_new_tokens,
            "threads": list(threads),
            "methods": {
                m: {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()} for m, p in methods.items()
            },
            "machine": f"{env['machine']}, {'/'.join(env.get('cpu_isa') or []) or 'no AVX2'}",
            "target_dtype": dtype_name(pair.target),
            "draft_dtype": dtype_name(pair.draft),
            "wall_minutes": (time.perf_counter() - started) / 60,
        },
        "rows": rows,
    }
    print(f"wrote {write_profile(Path(args.out), payload, args.adaptive)} and its report beside it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
