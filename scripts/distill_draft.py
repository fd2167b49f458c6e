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
    ap.add_argument("--lr-final-fraction", type=float, default=1.0, help="decay lr linearly to lr*this over --max-minutes")
    ap.add_argument("--batch-seqs", type=int, default=8)
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--train-per-gen", type=float, default=2.0)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--max-train-tokens", type=int, default=10**9)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init-from", default="pair", help="draft file to continue from when the work dir has no "
                    "checkpoint: 'pair' = the pair's committed draft (if any), 'none' = start from the target's layers")
    ap.add_argument("--command", default="make draft", help="the training command recorded in the model card")
    ap.add_argument("--export", action="store_true", help="only copy the work dir's draft to the pair's draft file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    cfg = pair_config(args.pair)
    workdir = Path(args.workdir or cache_root() / "distill" / args.pair)
    if args.export:
        from mtad.models.pairs import ASSETS_DIR

        dest = Path(cfg["draft"]["file"])
        dest = dest if dest.is_absolute() else ASSETS_DIR / dest
        from mtad.models.card import plot_curves, write_card

        shutil.copyfile(workdir / "draft.safetensors", dest)
        results = Path(__file__).resolve().parents[1] / "results" / "draft"
        results.mkdir(parents=True, exist_ok=True)
        if (workdir / "curve.jsonl").exists():
            shutil.copyfile(workdir / "curve.jsonl", results / "training_curve.jsonl")
        plot_curves(workdir, results / "training_curve.png")
        write_card(workdir, dest, dest.with_suffix(".md"), args.command, results / "measure.json")
        print(f"exported {workdir / 'draft.safetensors'} -> {dest} (+ model card {dest.with_suffix('.md').name})")
        return 0

    torch.set_num_threads(args.threads)
    from mtad.models.pairs import ASSETS_DIR

    init_from = None if args.init_from == "none" else args.init_from
    if init_from == "pair":
        init_from = str(ASSETS_DIR / cfg["draft"]["file"]) if cfg["draft"].get("file") else None
    target, tokenizer = load_target_and_tokenizer(cfg, device="cpu", dtype="float32")
    gen_target, _ = load_target_and_tokenizer(cfg, device="cpu", dtype="bfloat16")  # faster sampling on AMX
    dcfg = DistillConfig(
        workdir=str(workdir), layers=[int(x) for x in args.layers.split(",")], head_size=args.head_size,
        lr=args.lr, lr_final_fraction=args.lr_final_fraction, batch_seqs=args.batch_seqs, gen_batch=args.gen_batch, train_per_gen=args.train_per_gen,
        max_minutes=args.max_minutes, max_train_tokens=args.max_train_tokens, ckpt_minutes=args.ckpt_minutes,
        threads=args.threads, init_from=init_from,
    )
    Distiller(dcfg, target, tokenizer, gen_target=gen_target).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
