#!/usr/bin/env python
"""Distil (or keep distilling) the draft of a pair in two processes; resumable. See mtad/distill/.

    python scripts/distill_draft.py produce --pair smollm2_135m_head --max-minutes 60  # corpus (one core)
    python scripts/distill_draft.py train   --pair smollm2_135m_head --max-minutes 60  # draft (another core)
    python scripts/distill_draft.py export  --pair smollm2_135m_head  # into mtad/assets/drafts/
    python scripts/distill_draft.py card    --pair smollm2_135m_head  # the model card only (after make measure-draft)
    python scripts/distill_draft.py head-ab    --pair smollm2_135m_head  # 1 vs 2 layers, equal tokens, same batches
    python scripts/distill_draft.py head-vocab --pair smollm2_135m_head  # the trained head over other vocabularies
    python scripts/distill_draft.py dtype-ab   --pair smollm2_135m_head  # float32 vs bf16 compute, same batches
    python scripts/distill_draft.py head-design --pair smollm2_135m_head --ab-tokens 300000  # each lever of the
        fused design (three depths, own output layer, no feature loss, 1 vs 2 layers) from scratch, same records
    python scripts/distill_draft.py head-noise --pair smollm2_135m_head --ab-tokens 300000  # the fused head's
        input noise: scaled by all depths' RMS at once, by each depth's own, or none; from scratch, same records
    python scripts/distill_draft.py head-final --pair smollm2_135m_head --ab-tokens 300000  # the fused head's
        high depth, layer L-3 or the final feature, beside the one-depth head; from scratch, same records
    python scripts/distill_draft.py head-calibration --pair smollm2_135m_head  # the head's confidence against
        the target's acceptance of what it drafts, per drafted position -> results/draft/ (draft.json, calibration.md)
    python scripts/distill_draft.py snapshot  --pair smollm2_135m_head  # the work dir's sampled answers into
        the committed teacher-answers dataset (mtad/assets/drafts/teacher_answers/)
    python scripts/distill_draft.py featurize --pair smollm2_135m_head  # that dataset scored into the work dir's
        corpus (a fresh machine's first step: the trainers then read it as they read the producer's chunks)
    python scripts/distill_draft.py round-requests --pair smollm2_135m_head --count 15000 --bundle B.pt  # a
        GPU round's input: new distinct training requests and the held-out answers, token ids only
    python scripts/distill_draft.py round --pair smollm2_135m_head --bundle B.pt --out DIR --max-minutes 8  # on
        a GPU: answers sampled, corpus scored and held there, heads trained side by side (mtad/distill/gpu_round.py)
    python scripts/distill_draft.py round-export --pair smollm2_135m_head --out DIR  # the round's continued head
        (or --arm NAME) into mtad/assets/drafts/, its model card, the round's table in results/draft/head_design.md
(head-design, head-noise, head-final, head-ab, head-vocab and dtype-ab write the head_design section of
results/draft/draft.json and results/draft/head_design.md;
time them on a quiet machine.)
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
RESULTS = Path(__file__).resolve().parents[1] / "results" / "draft"

JOBS = (  # in the order --help lists them
    "produce",
    "train",
    "export",
    "card",
    "snapshot",
    "featurize",
    "head-design",
    "head-noise",
    "head-final",
    "head-calibration",
    "head-ab",
    "head-vocab",
    "dtype-ab",
    "round-requests",
    "round",
    "round-export",
)
# the jobs that read the stored corpus with the target loaded in float32 (`head_design`)
HEAD_DESIGN_JOBS = ("head-ab", "head-vocab", "dtype-ab", "head-design", "head-noise", "head-final", "head-calibration")
FUSED_JOBS = ("head-design", "head-noise", "head-final")  # the fused head's ablations (`fused_ablation`)
DECODING_DTYPE_JOBS = ("produce", "featurize", "round")  # the target's teacher work, in the decoding dtype
DISTILL_CONFIG = "mtad.distill.pipeline:DistillConfig"
HEAD_CONFIG = "mtad.distill.head_training:HeadTrainConfig"
# the options whose one default is the library's (option -> (module:object, its field or parameter)):
# argparse leaves them None and `fill_library_defaults` reads each after parsing, so --help loads no torch
LIBRARY_DEFAULTS = {
    "losses": (DISTILL_CONFIG, "losses"),
    "ab_tokens": (DISTILL_CONFIG, "ab_tokens"),
    "lr": (DISTILL_CONFIG, "lr"),
    "max_minutes": (DISTILL_CONFIG, "max_minutes"),
    "threads": (DISTILL_CONFIG, "threads"),
    "slots": (DISTILL_CONFIG, "slots"),
    "seed": (DISTILL_CONFIG, "seed"),
    "name": ("mtad.distill.pipeline:produce", "name"),
    "head_lr": (HEAD_CONFIG, "lr"),
    "unroll": (HEAD_CONFIG, "steps"),
    "head_layers": (HEAD_CONFIG, "num_layers"),
}


def main(argv=None) -> int:
    """Run one job on one pair's draft: parse the options, record the code state, then the job."""
    args = fill_library_defaults(parser().parse_args(argv))
    from mtad import provenance

    provenance.capture()  # the code this run starts from, whatever the checkout becomes while it runs
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.job} %(message)s")
    pair = PairDraft.of(args)
    if args.job == "snapshot":  # token ids only: no model needed
        return snapshot(args, pair)
    if args.job in ("export", "card"):
        return export_card(args, pair)
    if args.job == "round-requests":
        return round_requests(args, pair.cfg, pair.workdir)
    if args.job == "round-export":
        return round_export(args, pair.dest)
    return model_job(args, pair)


def parser() -> argparse.ArgumentParser:
    """The command line: the job, then its options, each with its one default."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", choices=list(JOBS))
    add_training_options(ap)
    add_head_options(ap)
    add_round_options(ap)
    return ap


def library_default(owner, name: str):
    """The default of field or parameter `name` of `owner` (a dataclass or a function);
    `inspect.Parameter.empty` where it has none."""
    import dataclasses
    import inspect

    if not dataclasses.is_dataclass(owner):
        return inspect.signature(owner).parameters[name].default
    field = {f.name: f for f in dataclasses.fields(owner)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    return inspect.Parameter.empty if field.default_factory is dataclasses.MISSING else field.default_factory()


def fill_library_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Each option of `LIBRARY_DEFAULTS` not given set to the library's default."""
    import importlib

    for dest, (source, name) in LIBRARY_DEFAULTS.items():
        if getattr(args, dest) is None:
            module, attribute = source.split(":")
            setattr(args, dest, library_default(getattr(importlib.import_module(module), attribute), name))
    return args


def default_of(dest: str) -> str:
    """The --help words naming where option `dest`'s default lives."""
    source, name = LIBRARY_DEFAULTS[dest]
    return f"(default: {source.split(':')[1]}'s {name})"


def names(text: str) -> list[str]:
    """A comma-separated option as its list of names."""
    return text.split(",")


def usage_error(message: str):
    """Exit as argparse does on a bad command line: the usage, then `message` (status 2)."""
    parser().error(message)


def add_training_options(ap: argparse.ArgumentParser) -> None:
    """The pair and its work dir, the layer draft's training and the producer's options."""
    ap.add_argument("--pair", default="smollm2_135m_head")
    ap.add_argument("--workdir", default=None, help="default: $MTAD_CACHE/distill/<pair>")
    ap.add_argument(
        "--init-from",
        default="pair",
        help="draft file to start from when the work dir has no "
        "checkpoint: 'pair' = the pair's committed draft, 'none' = the target's layers",
    )
    ap.add_argument(
        "--losses", type=names, help=f"A/B arms, comma-separated (one name = no A/B) {default_of('losses')}"
    )
    ap.add_argument("--ab-tokens", type=int, help=f"trained tokens per A/B arm {default_of('ab_tokens')}")
    ap.add_argument("--lr", type=float, help=f"layer draft: learning rate {default_of('lr')}")
    ap.add_argument("--max-minutes", type=float, help=f"the job's time limit {default_of('max_minutes')}")
    ap.add_argument("--threads", type=int, help=f"torch threads {default_of('threads')}")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when this torch sees a GPU)")
    ap.add_argument(
        "--slots", type=int, help=f"producer: rows sampling at once, refilled as answers end {default_of('slots')}"
    )
    ap.add_argument(
        "--mix",
        default=None,
        help="share of producer chunks per kind: real text, target-sampled, draft-sampled (on-policy); "
        "default: DistillConfig's mix for a layer draft, real=0.35,target=0.65 for a feature head",
    )
    ap.add_argument("--name", help=f"producer name (several producers may share a work dir) {default_of('name')}")
    ap.add_argument(
        "--seed", type=int, help=f"a producer's stream of items (give each producer its own) {default_of('seed')}"
    )


def add_head_options(ap: argparse.ArgumentParser) -> None:
    """The feature head's training and its A/Bs, the teacher-answers dataset and the model card's command."""
    ap.add_argument(
        "--head-lr", type=float, help=f"feature head: learning rate (AdamW, betas 0.9/0.95) {default_of('head_lr')}"
    )
    ap.add_argument(
        "--unroll", type=int, help=f"feature head: training-time-test steps on its own features {default_of('unroll')}"
    )
    ap.add_argument(
        "--head-layers", type=int, help=f"feature head: decoder layers (a new head only) {default_of('head_layers')}"
    )
    ap.add_argument(
        "--design",
        choices=["one_depth", "fused", "fused_final"],
        default="one_depth",
        help="feature head (a new head only): one_depth reads the target's final feature through its LM head "
        "with a feature loss; fused reads three depths by one map with its own output layer and no feature loss; "
        "fused_final the same with the final feature as its high depth",
    )
    ap.add_argument(
        "--dataset",
        default=None,
        help="snapshot/featurize: the teacher-answers directory of shards (default: committed)",
    )
    ap.add_argument(
        "--head-size",
        type=int,
        default=None,
        help="feature head: its vocabulary, the most probable tokens of the corpus (default 4096 for a new head; "
        "given with a head to start from, that head is read through the new vocabulary; 0 = full)",
    )
    ap.add_argument("--ab-layers", default="1,2", help="head-ab: the depths compared")
    ap.add_argument("--vocab-sizes", default="4096,8192,16384,0", help="head-vocab: vocabularies (0 = full)")
    ap.add_argument("--command", default="make draft", help="the training command recorded in the model card")


def add_round_options(ap: argparse.ArgumentParser) -> None:
    """A GPU round's requests, run and export."""
    ap.add_argument("--bundle", default=None, help="round-requests writes, round reads: a round's requests file")
    ap.add_argument("--count", type=int, default=15000, help="round-requests: new distinct requests")
    ap.add_argument(
        "--out", default=None, help="round: where the new answers, the heads and round.json go; snapshot: take them"
    )
    ap.add_argument(
        "--round-arms",
        default="all",
        help="round: the designs trained from scratch beside the committed head (names of gpu_round.ROUND_ARMS "
        "separated by ;, all, or '' for the continued head alone)",
    )
    ap.add_argument("--round-batch", type=int, default=32, help="round: sequences per training step")
    ap.add_argument(
        "--curve-every", type=int, default=2_000_000, help="round: each head's held-out curve every that many tokens"
    )
    ap.add_argument(
        "--lr-floor",
        type=float,
        default=0.1,
        help="round: the learning rate's end as a share of --head-lr, a cosine over the training time (1: constant)",
    )
    ap.add_argument("--arm", default=None, help="round-export: the arm whose head to export (default: the continued)")


@dataclass(frozen=True)
class PairDraft:
    """The pair a job works on: its config, its work dir, the committed draft file its training
    writes (`dest`) and whether that draft is a feature head (else a layer draft)."""

    cfg: dict
    workdir: Path
    dest: Path
    head: bool

    @classmethod
    def of(cls, args: argparse.Namespace) -> PairDraft:
        """`--pair` and `--workdir` read; a pair whose draft is no file of ours to train is a usage error."""
        from mtad.data import cache_root
        from mtad.models.pairs import ASSETS_DIR, pair_config

        cfg = pair_config(args.pair)
        workdir = Path(args.workdir or cache_root() / "distill" / args.pair)
        if cfg["draft"]["source"] not in ("distilled", "head") or not cfg["draft"].get("file"):
            usage_error(
                f"pair {args.pair}: its draft ({cfg['draft']['source']}) has no file of ours to train; "
                "pairs with a trained draft: those whose draft.source is distilled or head with a file"
            )
        dest = Path(cfg["draft"]["file"])
        dest = dest if dest.is_absolute() else ASSETS_DIR / dest
        return cls(cfg, workdir, dest, cfg["draft"]["source"] == "head")


def snapshot(args: argparse.Namespace, pair: PairDraft) -> int:
    """The work dir's sampled answers (or, with `--out`, a GPU round's) into the teacher-answers dataset."""
    from mtad.distill.answers import DATASET_DIR, export, target_identity
    from mtad.models.pairs import auto_dtype

    dataset = Path(args.dataset or DATASET_DIR)
    if args.out:  # a GPU round's answers (`round --out`)
        from mtad.distill.answers import export_rows, read_rows

        stats = export_rows(read_rows(Path(args.out) / "answers-round.parquet"), dataset)
    else:
        stats = export(pair.workdir / "corpus", dataset, target_identity(pair.cfg), auto_dtype(torch_device(args)))
    print(
        f"{dataset}: {stats['answers']} answers ({stats['added']} new), {stats['answer_tokens']} answer tokens, "
        f"{stats['distinct_prompts']} distinct prompts, {stats['bytes'] / 1e6:.1f} MB"
    )
    return 0


def export_card(args: argparse.Namespace, pair: PairDraft) -> int:
    """`export`: the trained draft copied over the pair's committed one, then its model card; `card`:
    the model card alone."""
    from mtad.distill.card import publish

    trained = pair.workdir / ("head.safetensors" if pair.head else "draft.safetensors")
    if args.job == "export":
        shutil.copyfile(trained, pair.dest)
    card = publish("head" if pair.head else "layers", pair.workdir, pair.dest, RESULTS, args.command)
    print(
        f"exported {trained} -> {pair.dest} (+ model card {card.name})"
        if args.job == "export"
        else f"model card written: {card}"
    )
    return 0


def model_job(args: argparse.Namespace, pair: PairDraft) -> int:
    """The jobs that run the target: its threads set, the distillation config read (a usage error
    on a bad `--mix`), the target loaded, then the job."""
    from mtad.devices import set_threads
    from mtad.distill import HeadTrainer, Trainer, produce

    set_threads(args.threads)
    init_from = initial_draft(args.init_from, pair)
    dcfg = distill_config(args, pair, init_from)
    target, tokenizer = load_target(args, pair)
    special_ids = tokenizer.all_special_ids + [tokenizer.eos_token_id]
    if args.job in HEAD_DESIGN_JOBS:
        return head_design(args, pair.workdir, pair.dest, target, special_ids)
    if args.job == "round":
        return gpu_round(args, pair, target, tokenizer, special_ids)
    if args.job == "featurize":
        return featurize_job(args, dcfg, target, tokenizer)
    if args.job == "produce":
        produce(dcfg, target, tokenizer, name=args.name)
    elif pair.head:
        HeadTrainer(head_config(args, pair, init_from), target, special_ids).run()
    else:
        Trainer(dcfg, target, special_ids=special_ids).run()
    return 0


def initial_draft(init_from: str, pair: PairDraft) -> str | None:
    """The draft file training starts from when the work dir has no checkpoint (`--init-from`):
    'none' -> None (the target's layers, or a new head), 'pair' -> the pair's committed draft."""
    start = None if init_from == "none" else str(pair.dest) if init_from == "pair" else init_from
    if pair.head and start == str(pair.dest) and not pair.dest.exists():
        return None  # the first head of a pair starts from scratch
    return start


def distill_config(args: argparse.Namespace, pair: PairDraft, init_from: str | None):
    """The producer's and the layer trainer's `DistillConfig` from the options; `--mix` parsed (by
    default per draft kind), a draft-sampled share for a feature head a usage error."""
    from mtad.distill import DistillConfig

    mix_spec = args.mix or ("real=0.35,target=0.65" if pair.head else None)  # None: DistillConfig's own mix
    mix = {kind: float(share) for kind, share in (kv.split("=") for kv in mix_spec.split(","))} if mix_spec else {}
    if pair.head and mix.get("draft"):
        usage_error(
            "--mix: a feature head does not sample answers on its own (draft-sampled chunks are for layer drafts)"
        )
    return DistillConfig(
        workdir=str(pair.workdir),
        init_from=init_from,
        losses=args.losses,
        **({"mix": mix} if mix else {}),
        ab_tokens=args.ab_tokens,
        lr=args.lr,
        max_minutes=args.max_minutes,
        threads=args.threads,
        features=pair.head,
        seed=args.seed,
        slots=args.slots,
    )


def head_config(args: argparse.Namespace, pair: PairDraft, init_from: str | None):
    """The feature head trainer's `HeadTrainConfig` from the options (`--design` sets the head's
    build and its feature loss; `--head-size` its vocabulary, read anew for a head it starts from)."""
    from mtad.distill import HeadTrainConfig

    return HeadTrainConfig(
        workdir=str(pair.workdir),
        init_from=init_from,
        lr=args.head_lr,
        steps=args.unroll,
        num_layers=args.head_layers,
        fused=args.design != "one_depth",
        own_output=args.design != "one_depth",
        final_depth=args.design == "fused_final",
        **({} if args.design == "one_depth" else {"reg_weight": 0.0}),  # one_depth: the config's feature loss
        revocabulary=args.head_size is not None and init_from is not None,
        **({} if args.head_size is None else {"head_size": args.head_size}),
        max_minutes=args.max_minutes,
        threads=args.threads,
    )


def load_target(args: argparse.Namespace, pair: PairDraft):
    """The pair's target (no gradients) and tokenizer on `--device`: the teacher work runs in the dtype
    decoding uses on this machine (what `auto` measured, else the device's rule), trainers keep float32
    master weights."""
    import torch

    from mtad.models.pairs import auto_dtype, auto_meaning, load_target_and_tokenizer

    device = str(torch_device(args))
    decoding_dtype = auto_meaning({**pair.cfg, "device": device}) or auto_dtype(torch.device(device))
    dtype = decoding_dtype if args.job in DECODING_DTYPE_JOBS else "float32"
    target, tokenizer = load_target_and_tokenizer(pair.cfg, device=device, dtype=dtype)
    target.requires_grad_(False)
    return target, tokenizer


def gpu_round(args: argparse.Namespace, pair: PairDraft, target, tokenizer, special_ids: list[int]) -> int:
    """`round`: a round on this machine's accelerator over `--bundle` into `--out` (`gpu_round.run_round`);
    each arm's held-out acceptance printed."""
    from mtad.distill.answers import DATASET_DIR, target_identity
    from mtad.distill.gpu_round import read_bundle, run_round, scratch_arms

    if not (args.bundle and args.out):
        usage_error("round needs --bundle (made by round-requests) and --out")
    try:
        scratch = scratch_arms(args.round_arms)
    except ValueError as e:
        usage_error(str(e))
    report = run_round(
        target,
        tokenizer,
        read_bundle(Path(args.bundle)),
        Path(args.dataset or DATASET_DIR),
        pair.dest,
        Path(args.out),
        target_identity(pair.cfg),
        args.max_minutes,
        batch_seqs=args.round_batch,
        curve_every=args.curve_every,
        special_ids=special_ids,
        seed=args.seed,
        scratch=scratch,
        lr_floor=args.lr_floor,
    )
    for name, arm in report["arms"].items():
        print(name, {s: round(v, 3) for s, v in arm["accept_paper"].items()})
    return 0


def featurize_job(args: argparse.Namespace, dcfg, target, tokenizer) -> int:
    """A fresh machine's first step: the held-out set, then the teacher-answers dataset scored into the
    work dir's corpus."""
    from mtad.distill.answers import DATASET_DIR, featurize
    from mtad.distill.pipeline import make_heldout

    workdir = Path(dcfg.workdir)
    make_heldout(dcfg, target, tokenizer)  # a fresh machine's held-out set (target answers to held-out requests)
    done = featurize(Path(args.dataset or DATASET_DIR), workdir / "corpus", target)
    print(f"scored {done} dataset answers into {workdir / 'corpus'}")
    return 0


def round_requests(args, cfg: dict, workdir: Path) -> int:
    """A GPU round's input (`gpu_round.write_bundle`): `--count` new distinct training requests, none
    already among the teacher answers, and the work dir's held-out answers, as token ids."""
    from transformers import AutoTokenizer

    from mtad.distill.answers import DATASET_DIR, read_rows
    from mtad.distill.gpu_round import draw_requests, write_bundle
    from mtad.distill.pipeline import heldout_path, load_heldout
    from mtad.models.gguf_cache import ensure_converted
    from mtad.tasks.heldout.installed_text import fingerprint

    if not args.bundle:
        raise SystemExit("round-requests needs --bundle (the file to write)")
    if not heldout_path(workdir).exists():
        raise SystemExit(
            f"no held-out answers at {heldout_path(workdir)}: `python scripts/distill_draft.py featurize "
            f"--pair {args.pair}` writes them"
        )
    spec = cfg["target"]
    tokenizer = AutoTokenizer.from_pretrained(
        str(ensure_converted(Path(spec["file"]).stem, spec["package"], str(spec["version"]), spec["file"]))
    )
    known = {tuple(r["prompt_ids"]) for r in read_rows(Path(args.dataset or DATASET_DIR))}
    requests = draw_requests(tokenizer, args.count, args.seed, known)
    meta = {"pair": args.pair, "seed": args.seed, "known_prompts": len(known), "text_sources": fingerprint()}
    path = write_bundle(Path(args.bundle), requests, load_heldout(workdir), meta)
    print(f"{path}: {len(requests)} new requests, {path.stat().st_size / 1e6:.1f} MB")
    return 0


def round_export(args, dest: Path) -> int:
    """A round's head (`--arm`, default the committed head continued) as the pair's draft, with its
    model card and the round's table among the head's design choices."""
    import json

    from mtad.distill.card_round import write_round_card
    from mtad.distill.gpu_round import CONTINUED
    from mtad.distill.head_reports import add_round

    report_path = Path(args.out or "") / "round.json"
    if not report_path.exists():
        raise SystemExit(f"no round report at {report_path}: give --out the directory a round wrote")
    report = json.loads(report_path.read_text())
    arm = args.arm or CONTINUED
    if arm not in report["arms"]:
        raise SystemExit(f"--arm {arm!r}: the round's arms are {', '.join(report['arms'])}")
    if CONTINUED in report["arms"]:  # the committed head, scored on the same held-out answers, stays unless beaten
        start, end = report["arms"][CONTINUED]["curve"][0], report["arms"][arm]["accept_paper"]
        before, after = (sum(float(p[str(s)]) for s in range(1, 5)) / 4 for p in (start, end))
        if after <= before:
            raise SystemExit(f"{arm!r} reads mean held-out E[accept] {after:.3f} <= the committed head's {before:.3f}")
    shutil.copyfile(report_path.parent / report["arms"][arm]["file"], dest)
    kept = {k: v for k, v in report.items() if k != "environment"}
    kept["environment"] = {k: report["environment"].get(k) for k in ("machine", "gpus", "versions", "dtype")}
    add_round(RESULTS, kept)
    command = "scripts/distill_draft.py round-requests, then round on a GPU, then round-export"
    card = write_round_card(report, arm, dest, dest.with_suffix(".md"), command, RESULTS)
    print(f"exported {arm!r} -> {dest} (+ model card {card.name}, results/draft/head_design.md)")
    return 0


def torch_device(args):
    import torch

    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def head_design(args, workdir: Path, head_file: Path, target, special_ids: list[int]) -> int:
    """The head's design choices on the stored corpus (`HEAD_DESIGN_JOBS`): the fused design's levers and
    variants, depth (an A/B from scratch), compute dtype and vocabulary, or its calibration; each written
    under results/draft/."""
    from mtad.distill.corpus import Corpus
    from mtad.distill.head_reports import write_design
    from mtad.distill.head_training import corpus_mass
    from mtad.distill.pipeline import load_heldout

    heldout = load_heldout(workdir)
    if args.job == "head-calibration":  # the committed head (else the work dir's) on the held-out answers
        return head_calibration(workdir, head_file, target, heldout)
    corpus = Corpus(workdir)
    # a fused head's vocabulary: the tokens of most p' mass (the trainer's rule); the A/Bs of the
    # one-depth head keep the raw mass they were measured with
    mass = corpus_mass(corpus.records, target.config.vocab_size, processed=args.job in FUSED_JOBS)
    if args.job in FUSED_JOBS:
        found = fused_ablation(args, workdir, target, corpus, heldout, mass, special_ids)
        if found is None:
            return 0
        key, value = found
    elif args.job == "head-ab":
        key, value = "layers_ab", depth_ab(args, workdir, target, corpus, heldout, mass, special_ids)
    elif args.job == "dtype-ab":
        key, value = "compute_dtype_ab", dtype_ab(args, workdir, head_file, target, corpus, heldout, mass, special_ids)
    else:
        key, value = "vocabulary", vocabulary(args, workdir, head_file, target, heldout, mass, special_ids)
    print(write_design(RESULTS, key, value))
    return 0


def trainer_vocabulary(args, workdir: Path, mass, special_ids: list[int]):
    """The trainer's config for the A/Bs (`--head-lr`, `--unroll`) and its vocabulary: the
    `head_size` tokens of most `mass` -> (config, token ids)."""
    from mtad.distill.head_training import HeadTrainConfig
    from mtad.distill.training import choose_head_tokens

    cfg = HeadTrainConfig(workdir=str(workdir), lr=args.head_lr, steps=args.unroll)
    return cfg, choose_head_tokens(mass, cfg.head_size, special_ids)


def head_calibration(workdir: Path, head_file: Path, target, heldout: dict) -> int:
    """`head-calibration`: the committed head's (else the work dir's) confidence against the target's
    acceptance on the held-out answers -> the calibration section of results/draft/draft.json, calibration.md."""
    import torch

    from mtad.distill.head_reports import write_calibration
    from mtad.distill.head_training import confidence_calibration
    from mtad.models.head import load_head

    head = load_head(head_file if head_file.exists() else workdir / "head.safetensors", target, torch.float32)
    meta = {k: v for k, v in head.meta.items() if k not in ("head_token_ids", "train_config")}
    table = confidence_calibration(head, heldout) | {"head": str(head_file.name), "meta": meta}
    print(write_calibration(RESULTS, table))
    return 0


def fused_ablation(
    args, workdir: Path, target, corpus, heldout: dict, mass, special_ids: list[int]
) -> tuple[str, dict] | None:
    """`head-design`, `head-noise`, `head-final`: the fused head's arms from scratch on the same
    records in the trainer's vocabulary, resumable in the work dir -> (the results' key, the
    ablation with its machine), or None when stopped before `--ab-tokens`."""
    import torch

    from mtad.distill.head_ablations import HIGH_DEPTH_ARMS, NOISE_ARMS, design_ablation
    from mtad.provenance import environment_record

    cfg, ids = trainer_vocabulary(args, workdir, mass, special_ids)
    key, folder, arms = {  # the results' key, the resumable run's folder, the arms (None: the designs)
        "head-design": ("design_ablation", "design", None),
        "head-noise": ("noise_ablation", "noise", NOISE_ARMS),
        "head-final": ("high_depth_ablation", "high_depth", HIGH_DEPTH_ARMS),
    }[args.job]
    save_dir = workdir / folder
    variant = {} if arms is None else {"arms": arms, "timed": False}  # a variant leaves the step unchanged
    limits = {"max_minutes": args.max_minutes, "save_dir": save_dir}
    value = design_ablation(cfg, target, corpus, heldout, args.ab_tokens, ids, **variant, **limits)
    if value is None:
        print(f"stopped before {args.ab_tokens} answer tokens per arm; the same command goes on from {save_dir}")
        return None
    env = environment_record([target])
    machine = f"{env['machine']}, {'/'.join(env['cpu_isa']) or 'no AVX2'}, {torch.get_num_threads()} thread(s)"
    return key, value | {"machine": machine, "environment": env, "vocabulary_by": "p'"}


def depth_ab(args, workdir: Path, target, corpus, heldout: dict, mass, special_ids: list[int]) -> dict:
    """`head-ab`: heads of each of `--ab-layers` depths from scratch on the same batches."""
    from mtad.distill.head_ablations import layers_ab

    cfg, ids = trainer_vocabulary(args, workdir, mass, special_ids)
    layers = tuple(int(n) for n in args.ab_layers.split(","))
    return layers_ab(cfg, target, corpus, heldout, layers, args.ab_tokens, ids)


def dtype_ab(args, workdir: Path, head_file: Path, target, corpus, heldout: dict, mass, special_ids: list[int]) -> dict:
    """`dtype-ab`: the committed head, read through the trainer's vocabulary, trained in float32 and
    in bf16 compute on the same batches."""
    import torch

    from mtad.distill.head_ablations import compute_dtype_ab
    from mtad.distill.head_training import with_vocabulary
    from mtad.models.head import load_head

    cfg, ids = trainer_vocabulary(args, workdir, mass, special_ids)
    head = with_vocabulary(load_head(head_file, target, torch.float32), target, ids)
    return compute_dtype_ab(cfg, corpus, heldout, head, args.ab_tokens)


def vocabulary(args, workdir: Path, head_file: Path, target, heldout: dict, mass, special_ids: list[int]) -> dict:
    """`head-vocab`: the trained head (the committed one, else the work dir's) read through each of
    `--vocab-sizes` most probable tokens of the corpus."""
    import torch

    from mtad.distill.head_ablations import vocabulary_sweep
    from mtad.models.head import load_head

    head = load_head(head_file if head_file.exists() else workdir / "head.safetensors", target, torch.float32)
    sizes = [int(n) for n in args.vocab_sizes.split(",")]
    rows = vocabulary_sweep(head, target, heldout, mass, sizes, special_ids)
    return {"head_trained_tokens": head.meta.get("trained_tokens"), "rows": rows}


if __name__ == "__main__":
    sys.exit(main())
