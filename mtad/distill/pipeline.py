"""The two resumable processes of draft distillation, sharing one work directory.

- `produce`: fills `corpus/` chunk by chunk, rotating over real text, target-sampled and
  draft-sampled (on-policy) answers, every chunk scored by one target forward; first writes
  the held-out set (`heldout.pt`: target answers at the paper's setting to held-out requests of
  every kind, `kinds.ALL_KINDS`; a record's `family` is its kind of request).
- `train`: trains the draft on the corpus as it grows; first an A/B of losses at equal
  tokens on identical batches (`ab.json`), then the winner alone. Checkpoints
  (`checkpoint.pt`, `draft.safetensors`) every few minutes and on SIGTERM; appends held-out
  statistics per kind of request to `curve.jsonl` and throughput to `rates.jsonl` (the producer's
  beside the roofline it measures when it starts, `roofline.py`).
Both stop at `max_minutes` or SIGTERM and continue where they stopped when started again.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..devices import set_threads
from ..models.draft import build_draft_from_target, load_draft, save_draft
from ..tasks.heldout.kinds import ALL_KINDS, REAL_TEXT_KINDS, TRAINED_KINDS, draw
from .corpus import PAPER_SETTING, Corpus, draw_batch, make_chunk, target_mass
from .roofline import roofline
from .training import (
    Arm,
    choose_head_tokens,
    collate,
    evaluate,
    full_to_head_index,
    train_step,
)
from .training_loop import BATCHES_BEFORE_TRAINING, RATE_WINDOW, append_jsonl, stop_event, train, wait_for_records

log = logging.getLogger(__name__)


@dataclass
class DistillConfig:
    workdir: str
    init_from: str | None = None  # draft file to start from when the work dir has no checkpoint
    layers: list[int] = field(default_factory=lambda: [0, 1, 2, 3])  # used without init_from
    head_size: int = 8192  # restricted head chosen on the corpus (without init_from); 0 = full vocabulary
    lr: float = 3e-4
    batch_seqs: int = 8
    losses: list[str] = field(default_factory=lambda: ["kl_raw", "kl_paper", "tv_paper"])  # A/B arms
    ab_tokens: int = 40_000  # trained tokens per arm before the A/B picks its winner
    chunk_seqs: int = 96
    slots: int = 32  # rows sampling at once, each refilled as its answer ends
    max_new_tokens: int = 192
    store_top_k: int = 32
    # chunk kinds: scoring real text or draft samples costs far less per token than target sampling
    mix: dict = field(default_factory=lambda: {"real": 0.3, "target": 0.2, "draft": 0.5})
    heldout_per_family: int = 10
    heldout_max_new_tokens: int = 128
    eval_every_tokens: int = 50_000
    ckpt_minutes: float = 5.0
    max_minutes: float = 60.0
    max_chunks: int = 10**9  # producer stops after this many chunks of its own
    max_train_tokens: int = 10**12
    threads: int = 1
    seed: int = 0
    features: bool = False  # store the target's hidden states per position (what a feature head reads)


# ----------------------------------------------------------------------------- producer


def heldout_path(workdir: Path) -> Path:
    return Path(workdir) / "heldout.pt"


def make_heldout(cfg: DistillConfig, target, tokenizer) -> None:
    """Target answers at the paper's setting to held-out requests of every kind (held-out subjects of
    the kinds trained on, and the kinds never trained on)."""
    path = heldout_path(Path(cfg.workdir))
    if path.exists():
        return
    rng = random.Random(10**6 + cfg.seed)
    items = [draw(kind, rng, held=True) for kind in ALL_KINDS for _ in range(cfg.heldout_per_family)]
    records, _ = make_chunk(  # every kind in one stream of slots
        items,
        "target",
        target,
        tokenizer,
        max_new=cfg.heldout_max_new_tokens,
        top_k=cfg.store_top_k,
        seed=10**6,
        setting=PAPER_SETTING,
        features=cfg.features,
        slots=cfg.slots,
    )
    path.parent.mkdir(parents=True, exist_ok=True)  # a fresh machine's first job may be this one
    torch.save({"records": records}, path)


def load_heldout(workdir: Path) -> dict[str, list[dict]]:
    """The producer's held-out records by kind of request (waits until the producer has written them)."""
    path = heldout_path(Path(workdir))
    while not path.exists():
        log.info("waiting for the producer's held-out set %s", path)
        time.sleep(10)
    out: dict[str, list[dict]] = {}
    for r in torch.load(path, weights_only=False)["records"]:
        out.setdefault(r["family"], []).append(r)
    return out


def produce(cfg: DistillConfig, target, tokenizer, name: str = "p0") -> None:
    """The producer `name`: the machine's roofline, the held-out set, then chunk after chunk of the
    kinds of `cfg.mix` into `corpus/` (`chunk_<name>_<n>.pt`, numbered on from the chunks it wrote
    before; each one's rates in `rates.jsonl`) until `max_minutes`, `max_chunks` or SIGTERM."""
    set_threads(cfg.threads)
    workdir = Path(cfg.workdir)
    corpus = Corpus(workdir, load=False)
    stop, t_start = stop_event(), time.time()
    ceiling = record_roofline(target, cfg.slots, workdir)
    make_heldout(cfg, target, tokenizer)
    n = len([p for p in corpus.dir.glob(f"chunk_{name}_*.pt")])
    latest = LatestDraft(workdir, cfg.init_from, target)
    kinds, weights = zip(*cfg.mix.items())
    while not stop.is_set() and (time.time() - t_start) / 60 < cfg.max_minutes and n < cfg.max_chunks:
        rng = random.Random(cfg.seed * 1_000_003 + n)
        kind, draft = rng.choices(kinds, weights)[0], None
        if kind == "draft":
            draft = latest.get()
            kind = "draft" if draft is not None else "target"  # no draft yet: the target samples
        kind_weights = REAL_TEXT_KINDS if kind == "real" else dict.fromkeys(TRAINED_KINDS, 1.0)  # sampled: alike
        items = draw_batch(rng, draw, cfg.chunk_seqs, kind_weights, real=kind == "real")
        records, meta = make_chunk(
            items,
            kind,
            target,
            tokenizer,
            draft=draft,
            max_new=cfg.max_new_tokens,
            top_k=cfg.store_top_k,
            seed=cfg.seed * 1_000_003 + n,
            features=cfg.features,
            slots=cfg.slots,
        )
        corpus.write(f"{name}_{n:05d}", records, meta)
        n += 1
        record_chunk(workdir, n, meta, ceiling)


def record_roofline(target, slots: int, workdir: Path) -> dict:
    """What this machine allows (`roofline`), appended to `rates.jsonl` and logged: printed beside
    every chunk's rates."""
    ceiling = roofline(target, slots)
    append_jsonl(workdir / "rates.jsonl", {"process": "roofline", "time": time.time()} | ceiling)
    log.info(
        "roofline: scoring %.0f positions/s, sampling %.0f tokens/s (%d slots)",
        ceiling["scored_positions_per_s"],
        ceiling["sampled_tokens_per_s"],
        slots,
    )
    return ceiling


class LatestDraft:
    """The draft the producer samples on-policy from: the trainer's latest `draft.safetensors`
    (loaded again whenever the file is newer), else `init_from`."""

    def __init__(self, workdir: Path, init_from: str | None, target):
        self.file, self.init_from, self.target = workdir / "draft.safetensors", init_from, target
        self.draft, self.mtime = None, 0.0

    def get(self):
        """The latest draft, or None where there is none to sample from."""
        source = self.file if self.file.exists() else self.init_from
        if source is None:
            return None
        if self.draft is None or (self.file.exists() and self.file.stat().st_mtime > self.mtime):
            self.draft = load_draft(source, self.target, dtype=torch.float32).eval()
            self.mtime = Path(source).stat().st_mtime
        return self.draft


def record_chunk(workdir: Path, n: int, meta: dict, ceiling: dict) -> None:
    """Chunk `n`'s rates appended to `rates.jsonl` (its `meta` completed with them) and logged
    beside the roofline."""
    meta.update(chunk=n, time=time.time(), tokens_per_s=meta["tokens"] / (meta["sample_s"] + meta["score_s"]))
    meta["scored_positions_per_s"] = meta["positions"] / meta["score_s"]
    append_jsonl(workdir / "rates.jsonl", {"process": "produce"} | meta)
    log.info(
        "chunk %d (%s): %d answer tokens, sampled in %.1fs (%.0f tok/s; roofline %.0f), "
        "scored %d positions in %.1fs (%.0f/s; roofline %.0f)",
        n,
        meta["kind"],
        meta["tokens"],
        meta["sample_s"],
        meta["tokens"] / max(meta["sample_s"], 1e-9),
        ceiling["sampled_tokens_per_s"],
        meta["positions"],
        meta["score_s"],
        meta["scored_positions_per_s"],
        ceiling["scored_positions_per_s"],
    )


# ----------------------------------------------------------------------------- trainer


class Trainer:
    """The layer draft's arm of `training_loop.train`: one draft per loss of the A/B on identical batches
    until `ab_tokens`, then the winner alone. Checkpoints hold every arm's trainable weights and
    optimiser; `draft.safetensors` is written once one arm is left (the producer samples from it)."""

    def __init__(self, cfg: DistillConfig, target, special_ids: list[int] = ()):
        self.cfg, self.target, self.special_ids = cfg, target, list(special_ids)
        self.workdir = Path(cfg.workdir)
        self.corpus = Corpus(self.workdir)
        self.rng = random.Random(cfg.seed)
        self.state = {"step": 0, "trained_tokens": 0, "winner": None, "runs": []}
        self.arms: list[Arm] = []

    def run(self) -> None:
        train(self)

    # -- draft, arms and checkpoints
    def _new_draft(self):
        if self.cfg.init_from:
            return load_draft(self.cfg.init_from, self.target, dtype=torch.float32)
        head = None
        if self.cfg.head_size:
            wait_for_records(self.corpus, BATCHES_BEFORE_TRAINING * self.cfg.batch_seqs)  # the head: first chunks
            mass = target_mass(self.target, self.corpus.records)
            head = choose_head_tokens(mass, self.cfg.head_size, self.special_ids)
            self.state["head_mass_coverage"] = float(mass[head].sum() / mass.sum())
        return build_draft_from_target(self.target, self.cfg.layers, head).float()

    def build(self, saved: dict | None) -> None:
        if saved is not None:
            self.state = saved["state"]
            for arm_saved in saved["arms"]:
                arm = Arm(
                    arm_saved["name"],
                    build_draft_from_target(self.target, saved["layers"], saved["head"]).float(),
                    self.cfg.lr,
                    arm_saved["loss"],
                )
                arm.draft.load_state_dict(arm_saved["draft"], strict=False)
                arm.optimizer.load_state_dict(arm_saved["optimizer"])
                for group in arm.optimizer.param_groups:  # this run's learning rate, not the saved one
                    group["lr"] = self.cfg.lr
                self.arms.append(arm)
            log.info(
                "resumed at step %d, %d trained tokens, arms %s",
                self.state["step"],
                self.state["trained_tokens"],
                [a.name for a in self.arms],
            )
            return
        base = Arm("base", self._new_draft(), self.cfg.lr, self.cfg.losses[0])
        losses = [self.state["winner"]] if self.state["winner"] else self.cfg.losses
        self.arms = (
            [base.fork(loss, loss, self.cfg.lr) for loss in losses]
            if len(losses) > 1
            else [Arm(losses[0], base.draft, self.cfg.lr, losses[0])]
        )

    def checkpoint(self) -> dict:
        lead = self.arms[0].draft
        return {
            "layers": list(lead.config.draft_source_layers),
            "head": list(lead.config.draft_head_token_ids) if lead.is_restricted else None,
            "arms": [
                {
                    "name": a.name,
                    "loss": a.loss,
                    "optimizer": a.optimizer.state_dict(),
                    "draft": {
                        k: v
                        for k, v in a.draft.state_dict().items()
                        if k in {n for n, p in a.draft.named_parameters() if p.requires_grad}
                    },
                }
                for a in self.arms
            ],
            "state": self.state,
        }

    def export(self) -> None:
        if len(self.arms) == 1:  # the producer samples on-policy from this file
            meta = {
                "trained_tokens": self.state["trained_tokens"],
                "steps": self.state["step"],
                "loss": self.arms[0].loss,
            }
            save_draft(self.arms[0].draft, self.workdir / "draft.safetensors", extra_meta=meta)  # written atomically

    # -- steps, evaluation and the A/B
    def heldout(self) -> dict[str, list[dict]]:
        return load_heldout(self.workdir)

    def start(self) -> None:
        self.head_index = full_to_head_index(self.arms[0].draft)

    def step(self, records: list[dict]) -> int:
        batch = collate(records)
        for arm in self.arms:
            arm.losses.append(train_step(arm.draft, arm.optimizer, batch, self.head_index, arm.loss))
        return len(self.arms)

    def window(self, rate: float) -> tuple[dict, str]:
        losses = {a.name: sum(a.losses[-RATE_WINDOW:]) / RATE_WINDOW for a in self.arms}
        row = {"arms": len(self.arms), "trained_tokens_per_s": rate, "step": self.state["step"], "losses": losses}
        rounded = {a: round(v, 4) for a, v in losses.items()}
        return row, f"losses {rounded}"

    def evaluate(self, heldout) -> list[tuple[str, str, dict]]:
        out = []
        for arm in self.arms:
            stats = evaluate(arm.draft, heldout)
            out.append((arm.name, arm.loss, stats))
            log.info(
                "eval %s at %d tokens: %s",
                arm.name,
                self.state["trained_tokens"],
                {f: round(s["accept_paper"], 4) for f, s in stats.items()},
            )
        return out

    def after_step(self, heldout) -> bool:
        if len(self.arms) > 1 and self.state["trained_tokens"] >= self.cfg.ab_tokens:
            self.finish_ab(heldout)
            return True
        return False

    def finish_ab(self, heldout) -> None:
        """Keep the arm with the highest mean held-out acceptance at the paper's setting."""
        results = {arm.name: evaluate(arm.draft, heldout) for arm in self.arms}
        winner = max(results, key=lambda a: results[a]["mean"]["accept_paper"])
        ab = {"tokens_per_arm": self.state["trained_tokens"], "winner": winner, "results": results}
        (self.workdir / "ab.json").write_text(json.dumps(ab, indent=1))
        log.info(
            "A/B at %d tokens per arm: %s -> %s",
            self.state["trained_tokens"],
            {a: round(r["mean"]["accept_paper"], 4) for a, r in results.items()},
            winner,
        )
        self.arms = [a for a in self.arms if a.name == winner]
        self.state["winner"] = winner
