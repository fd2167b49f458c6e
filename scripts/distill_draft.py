#!/usr/bin/env python
"""Distil (or keep distilling) the draft of a pair in two processes; resumable. See mtad/models/distill/.

    python scripts/distill_draft.py produce --pair smollm2_135m --max-minutes 60   # corpus (one core)
    python scripts/distill_draft.py train   --pair smollm2_135m --max-minutes 60   # draft (another core)
    python scripts/distill_draft.py export  --pair smollm2_135m                    # into mtad/assets/drafts/
    python scripts/distill_draft.py card    --pair smollm2_135m                    # the model card only (after make measure-draft)
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None) -> int:
    import torch

    from mtad.models.distill import DistillConfig, HeadTrainConfig, HeadTrainer, Trainer, produce
    from mtad.models.gguf_cache import cache_root
    from mtad.models.pairs import ASSETS_DIR, load_target_and_tokenizer, pair_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", choices=["produce", "train", "export", "card"])
    ap.add_argument("--pair", default="smollm2_135m")
    ap.add_argument("--workdir", default=None, help="default: $MTAD_CACHE/distill/<pair>")
    ap.add_argument("--init-from", default="pair", help="draft file to start from when the work dir has no "
                    "checkpoint: 'pair' = the pair's committed draft, 'none' = the target's layers")
    ap.add_argument("--losses", default="kl_raw,kl_paper,tv_paper", help="A/B arms (one name = no A/B)")
    ap.add_argument("--ab-tokens", type=int, default=40_000)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mix", default=None,
                    help="share of producer chunks per kind: real text, target-sampled, draft-sampled (on-policy); "
                    "default real=0.3,target=0.2,draft=0.5 for a layer draft, real=0.35,target=0.65 for a feature head")
    ap.add_argument("--name", default="p0", help="producer name (several producers may share a work dir)")
    ap.add_argument("--seed", type=int, default=0, help="a producer's stream of items (give each producer its own)")
    ap.add_argument("--head-lr", type=float, default=1e-3, help="feature head: learning rate (AdamW, betas 0.9/0.95)")
    ap.add_argument("--unroll", type=int, default=3, help="feature head: training-time-test steps on its own features")
    ap.add_argument("--head-layers", type=int, default=1, help="feature head: decoder layers (a new head only)")
    ap.add_argument("--command", default="make draft", help="the training command recorded in the model card")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.job} %(message)s")

    cfg = pair_config(args.pair)
    workdir = Path(args.workdir or cache_root() / "distill" / args.pair)
    dest = Path(cfg["draft"]["file"])
    dest = dest if dest.is_absolute() else ASSETS_DIR / dest
    head = cfg["draft"]["source"] == "head"
    if args.job in ("export", "card"):
        from mtad.models.card import plot_curves, write_card, write_head_card

        trained = workdir / ("head.safetensors" if head else "draft.safetensors")
        if args.job == "export":
            shutil.copyfile(trained, dest)
        results = Path(__file__).resolve().parents[1] / "results" / "draft"
        results.mkdir(parents=True, exist_ok=True)
        prefix = "head_training_" if head else "training_"  # one set of training records per draft kind
        for name in ("curve.jsonl", "ab.json", "rates.jsonl"):
            if (workdir / name).exists():
                shutil.copyfile(workdir / name, results / (prefix + name))
        plot_curves(workdir, results / f"{prefix}curve.png")
        if head:
            write_head_card(workdir, dest, dest.with_suffix(".md"), args.command, results / "measure.json")
        else:
            write_card(workdir, dest, dest.with_suffix(".md"), args.command, results / "measure.json",
                       results / "pipeline_rates.json")
        print(f"exported {trained} -> {dest} (+ model card {dest.with_suffix('.md').name})"
              if args.job == "export" else f"model card written: {dest.with_suffix('.md')}")
        return 0

    torch.set_num_threads(args.threads)
    init_from = None if args.init_from == "none" else str(dest) if args.init_from == "pair" else args.init_from
    if head and init_from == str(dest) and not dest.exists():
        init_from = None  # the first head of a pair starts from scratch
    mix_spec = args.mix or ("real=0.35,target=0.65" if head else "real=0.3,target=0.2,draft=0.5")
    mix = {kind: float(share) for kind, share in (kv.split("=") for kv in mix_spec.split(","))}
    dcfg = DistillConfig(workdir=str(workdir), init_from=init_from, losses=args.losses.split(","), mix=mix,
                         ab_tokens=args.ab_tokens, lr=args.lr, max_minutes=args.max_minutes, threads=args.threads,
                         features=head, seed=args.seed)
    target, tokenizer = load_target_and_tokenizer(cfg, device="cpu", dtype="float32")
    target.requires_grad_(False)
    special_ids = tokenizer.all_special_ids + [tokenizer.eos_token_id]
    if args.job == "produce":
        produce(dcfg, target, tokenizer, name=args.name)
    elif head:
        hcfg = HeadTrainConfig(workdir=str(workdir), init_from=init_from, lr=args.head_lr, steps=args.unroll,
                               num_layers=args.head_layers, max_minutes=args.max_minutes, threads=args.threads)
        HeadTrainer(hcfg, target, special_ids).run()
    else:
        Trainer(dcfg, target, special_ids=special_ids).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
