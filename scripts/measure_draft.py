#!/usr/bin/env python
"""Measure a pair's draft on held-out prompts of every task family (see mtad/models/measure.py).

    python scripts/measure_draft.py --pair smollm2_135m --per-family 5 --max-new-tokens 64
Writes results/draft/measure.json and measure.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    from mtad.models import load_pair
    from mtad.models.draft import read_draft_meta
    from mtad.models.measure import markdown, measure
    from mtad.models.pairs import ASSETS_DIR
    from mtad.runner.provenance import environment_record

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m")
    ap.add_argument("--draft-file", default=None, help="measure this draft file instead of the pair's")
    ap.add_argument("--per-family", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("MTAD_THREADS", "1")))
    ap.add_argument("--out", default=str(ROOT / "results" / "draft"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    pair = load_pair(args.pair, draft_file=args.draft_file, device="cpu")
    draft_file = Path(args.draft_file or ASSETS_DIR / pair.config["draft"]["file"])
    meta = read_draft_meta(draft_file)
    t0 = time.time()
    result = measure(pair, args.per_family, args.max_new_tokens, args.seed)
    result |= {
        "pair": pair.name, "draft_file": os.path.relpath(draft_file.resolve(), ROOT),
        "draft_meta": {k: v for k, v in meta.items() if k != "head_token_ids"}
        | {"head_size": len(meta["head_token_ids"]) if meta["head_token_ids"] else None},
        "environment": environment_record([pair.target, pair.draft]), "threads": args.threads,
        "dtypes": {"target": str(pair.target.dtype), "draft": str(pair.draft.dtype)}, "wall_seconds": round(time.time() - t0, 1),
        "load_average_1_5_15min_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    header = [f"# Draft measurement: {result['pair']}", "",
              f"Draft `{result['draft_file']}` (layers {meta['source_layers']}, "
              f"{meta.get('trained_tokens', '?')} training tokens). Held-out prompts per family: {args.per_family} "
              f"(subjects never used in training), at most {args.max_new_tokens} new tokens, seed {args.seed}. "
              f"Machine: {result['environment']['machine']}, decode path {result['decode_path']}, torch threads {args.threads}, target {result['dtypes']['target']}, "
              f"draft {result['dtypes']['draft']}; load average at the end {result['load_average_1_5_15min_at_end']}."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "measure.md").write_text(markdown(result, header))
    print((out / "measure.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
