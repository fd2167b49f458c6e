#!/usr/bin/env python
"""Distil (or keep distilling) the draft of a pair; resumable. See mtad/models/distill.py.

    python scripts/distill_draft.py --pair smollm2_135m --max-minutes 60
    python scripts/distill_draft.py --pair smollm2_135m --export   # copy the latest draft into mtad/assets/drafts/
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None) -> int:
    from mtad.models.distill import DistillConfig, Distiller
    from mtad.models.gguf_cache import cache_root
    from mtad.models.pairs import load_target_and_tokenizer, pair_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m")
    ap.add_argument("--workdir", default=None, help="default: $MTAD_CACHE/distill/<pair>")
    ap.add_argument("--layers", default="0,1,2,3", help="target layers the draft starts from (new runs only)")
    ap.add_argument("--head-size", type=int, default=8192, help="restricted head size; 0 = full vocabulary")
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--batch-seqs", type=int, default=8)
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--train-per-gen", type=float, default=2.0)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--max-train-tokens", type=int, default=10**9)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--export", action="store_true", help="only copy the work dir's draft to the pair's draft file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    cfg = pair_config(args.pair)
    workdir = Path(args.workdir or cache_root() / "distill" / args.pair)
    if args.export:
        from mtad.models.pairs import ASSETS_DIR

        dest = Path(cfg["draft"]["file"])
        dest = dest if dest.is_absolute() else ASSETS_DIR / dest
        shutil.copyfile(workdir / "draft.safetensors", dest)
        for extra in ("curve.jsonl", "state.json"):
            if (workdir / extra).exists():
                shutil.copyfile(workdir / extra, dest.with_name(dest.stem + "." + extra))
        print(f"exported {workdir / 'draft.safetensors'} -> {dest}")
        return 0

    torch.set_num_threads(args.threads)
    target, tokenizer = load_target_and_tokenizer(cfg, device="cpu", dtype="float32")
    gen_target, _ = load_target_and_tokenizer(cfg, device="cpu", dtype="bfloat16")  # faster sampling on AMX
    dcfg = DistillConfig(
        workdir=str(workdir), layers=[int(x) for x in args.layers.split(",")], head_size=args.head_size,
        lr=args.lr, batch_seqs=args.batch_seqs, gen_batch=args.gen_batch, train_per_gen=args.train_per_gen,
        max_minutes=args.max_minutes, max_train_tokens=args.max_train_tokens, ckpt_minutes=args.ckpt_minutes,
        threads=args.threads,
    )
    Distiller(dcfg, target, tokenizer, gen_target=gen_target).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
