#!/usr/bin/env python
"""`make profile`: where one decoding block's time goes, for every method on the pair's path, at one
and two threads, on short (held-out chat, ~50 tokens) and long (CNN/DailyMail articles, 400-1,000
tokens) prompts, as cells (conf/experiment/profile.yaml; mtad/experiments/block_profiles.py) -> the
`profile` section of bench.json and profile.md under --out (`profile_adaptive` with --adaptive).
Time it on a quiet machine: nothing else running. A rerun resumes the cells.

    python scripts/profile_blocks.py [--pair smollm2_135m_head] [--prompts 3] [--max-new-tokens 40]
    python scripts/profile_blocks.py --adaptive     # the methods with adaptive drafting on (the bench's thresholds)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtad.bench.block_profile import write_profile
from mtad.experiments.block_profiles import run_profile
from mtad.provenance import capture

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m_head")
    experiment = "(default: conf/experiment/profile.yaml's)"
    ap.add_argument("--prompts", type=int, help=f"prompts per length group {experiment}")
    ap.add_argument("--max-new-tokens", type=int, help=f"per generation {experiment}")
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive drafting on, at each method's threshold (its MethodSpec.adaptive_stop)",
    )
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--results-root", default="results/local/runs", help="where the profile's cells go")
    args = ap.parse_args(argv)
    capture()  # the code this run starts from, whatever the checkout becomes while it runs
    payload = run_profile(
        args.pair,
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        threads=tuple(int(n) for n in args.threads.split(",")),
        adaptive=args.adaptive,
        results_root=args.results_root,
    )
    print(f"wrote {write_profile(Path(args.out), payload, args.adaptive)} and its report beside it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
