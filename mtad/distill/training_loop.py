"""The trainer's loop, shared by every draft kind (`pipeline.Trainer`, `head_training.HeadTrainer`).

`train(arm)` reads balanced batches from the corpus as it grows, steps, evaluates on the held-out
set every `eval_every_tokens` (rows in `curve.jsonl`), logs rates every 20 steps (`rates.jsonl`),
checkpoints every `ckpt_minutes` and at the end (`checkpoint.pt`, the arm's export, `state.json`),
and stops at `max_minutes`, `max_train_tokens` or SIGTERM; started again it resumes from
`checkpoint.pt`. What differs per draft kind is the arm (`DraftArm`).
"""

from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch

from ..devices import set_threads
from .corpus import Corpus
from .training import sample_batch

log = logging.getLogger(__name__)

RATE_WINDOW = 20  # steps per row of rates.jsonl
REFRESH_SECONDS = 30  # how often the trainer looks for the producer's new chunks
BATCHES_BEFORE_TRAINING = 4  # records needed, in batches, before the first step


def stop_event() -> threading.Event:
    """Set by SIGTERM/SIGINT: the loop finishes its step, saves, and exits."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    return stop


def append_jsonl(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def wait_for_records(corpus: Corpus, count: int) -> None:
    """Until the corpus holds `count` records (a fresh work dir: the producer's first chunks)."""
    while len(corpus.records) < count:
        time.sleep(5 if corpus.refresh() == 0 else 0)


class DraftArm(Protocol):
    """What a draft kind brings to `train`. `state` holds at least step, trained_tokens and runs (the
    loop advances and records them) and is checkpointed whole; `cfg` has the loop's fields
    (threads, batch_seqs, eval_every_tokens, ckpt_minutes, max_minutes, max_train_tokens)."""

    cfg: Any
    workdir: Path
    corpus: Corpus
    rng: random.Random
    state: dict

    def build(self, saved: dict | None) -> None:
        """The draft(s) and optimiser(s): from the saved checkpoint, else new."""

    def heldout(self) -> dict[str, list[dict]]:
        """The held-out records by kind of request."""

    def start(self) -> None:
        """What this run's steps read (the head index, device, compute dtype), once the draft is built and
        the held-out set loaded."""

    def step(self, records: list[dict]) -> int:
        """One optimiser step on `records` for every draft under training; how many drafts that is."""

    def window(self, rate: float) -> tuple[dict, str]:
        """The rates row of the last `RATE_WINDOW` steps (beside process and time) and its log text."""

    def evaluate(self, heldout: dict) -> list[tuple[str, str, dict]]:
        """(draft name, loss name, held-out statistics) for every draft under training."""

    def after_step(self, heldout: dict) -> bool:
        """Whatever ends with a step (the layer draft's A/B); True when that calls for a checkpoint and a
        new evaluation schedule."""

    def checkpoint(self) -> dict:
        """The contents of `checkpoint.pt`, `state` among them."""

    def export(self) -> None:
        """The draft file beside the checkpoint, where there is one to write."""


def save_checkpoint(arm: DraftArm) -> None:
    """`checkpoint.pt` (written atomically), the arm's export and `state.json`."""
    path = arm.workdir / "checkpoint.pt"
    torch.save(arm.checkpoint() | {"rng": arm.rng.getstate()}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    arm.export()
    (arm.workdir / "state.json").write_text(json.dumps(arm.state, indent=1))


def evaluate(arm: DraftArm, heldout: dict) -> None:
    """One row of `curve.jsonl` per draft under training."""
    for name, loss, stats in arm.evaluate(heldout):
        row = {
            "arm": name,
            "loss": loss,
            "trained_tokens": arm.state["trained_tokens"],
            "step": arm.state["step"],
            "corpus_tokens": arm.corpus.answer_tokens,
            "time": time.time(),
        } | stats
        append_jsonl(arm.workdir / "curve.jsonl", row)


def train(arm: DraftArm) -> None:
    """Train `arm` on the corpus until the time or token limit or SIGTERM; resumable."""
    cfg, corpus = arm.cfg, arm.corpus
    set_threads(cfg.threads)
    ckpt = arm.workdir / "checkpoint.pt"
    saved = torch.load(ckpt, weights_only=False) if ckpt.exists() else None
    arm.build(saved)
    if saved is not None and "rng" in saved:  # the batch stream goes on where it stopped, not from its seed
        arm.rng.setstate(saved["rng"])
    state = arm.state  # after `build`: a resumed arm holds the saved state
    state["runs"].append({"from_tokens": state["trained_tokens"], "config": asdict(cfg)})
    heldout = arm.heldout()
    if state["step"] == 0:
        evaluate(arm, heldout)
    arm.start()
    stop, t_start = stop_event(), time.time()
    last_ckpt = last_refresh = window_start = time.time()
    window_tokens, by_family = 0, corpus.by_family()
    next_eval = state["trained_tokens"] + cfg.eval_every_tokens
    least = BATCHES_BEFORE_TRAINING * cfg.batch_seqs
    while (
        not stop.is_set()
        and (time.time() - t_start) / 60 < cfg.max_minutes
        and state["trained_tokens"] < cfg.max_train_tokens
    ):
        if time.time() - last_refresh > REFRESH_SECONDS or len(corpus.records) < least:
            if corpus.refresh() == 0 and len(corpus.records) < least:
                time.sleep(5)  # a fresh work dir: wait for the producer's first chunks
                continue
            by_family, last_refresh = corpus.by_family(), time.time()
        records = sample_batch(by_family, cfg.batch_seqs, arm.rng)
        drafts = arm.step(records)
        n = sum(len(r["answer_ids"]) for r in records)
        state["step"] += 1
        state["trained_tokens"] += n
        window_tokens += n * drafts
        if state["step"] % RATE_WINDOW == 0:
            rate = window_tokens / (time.time() - window_start)
            row, note = arm.window(rate)
            append_jsonl(arm.workdir / "rates.jsonl", {"process": "train", "time": time.time()} | row)
            log.info("step %d tokens %d %.0f tok/s %s", state["step"], state["trained_tokens"], rate, note)
            window_tokens, window_start = 0, time.time()
        if arm.after_step(heldout):
            next_eval = state["trained_tokens"] + cfg.eval_every_tokens
            save_checkpoint(arm)
        if state["trained_tokens"] >= next_eval:
            evaluate(arm, heldout)
            next_eval += cfg.eval_every_tokens
        if time.time() - last_ckpt > cfg.ckpt_minutes * 60:
            save_checkpoint(arm)
            last_ckpt = time.time()
    save_checkpoint(arm)
    evaluate(arm, heldout)
