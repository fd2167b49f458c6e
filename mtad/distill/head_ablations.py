"""Feature heads trained side by side on identical records at equal tokens: the design choices
behind the committed head (depth, compute dtype, the fused design's levers one at a time, the
input noise) and its vocabulary, each measured on the held-out target answers
(`head_training.evaluate_head`). `head_reports` renders what they return."""

from __future__ import annotations

import copy
import logging
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ..devices import sync
from ..models.head import FeatureHead, build_head, save_head
from ..provenance import dtype_name
from .corpus import Corpus
from .head_training import (
    HeadTrainConfig,
    collate_features,
    compute_dtype,
    evaluate_head,
    feature_key,
    head_optimizer,
    optimizer_step,
    to_device,
    with_vocabulary,
)
from .training import choose_head_tokens, full_to_head_index, sample_batch

log = logging.getLogger(__name__)


def vocabulary_sweep(
    head: FeatureHead, target, heldout: dict, mass: torch.Tensor, sizes: list[int], special_ids: list[int] = ()
) -> list[dict]:
    """Held-out acceptance per draft position and the fast-path step cost of the head read
    through the `sizes` most probable tokens of the corpus (0 = the full vocabulary)."""
    from .draft_measurement import step_ms

    rows, target_ms = [], step_ms(target)
    for size in sizes:
        ids = choose_head_tokens(mass, size, list(special_ids)) if size else None
        variant = with_vocabulary(head, target, ids)
        stats = evaluate_head(variant, heldout)
        rows.append(
            {
                "vocabulary": size or head.vocab_size,
                "mass_coverage": float(mass[ids].sum() / mass.sum()) if ids else 1.0,
                "accept_paper": {s: stats["mean"][f"accept_paper@{s}"] for s in range(1, 5)},
                "by_family": {f: stats[f]["accept_paper"] for f in stats if f != "mean"},
                "step_ms": step_ms(target, variant),
                "target_step_ms": target_ms,
            }
        )
        log.info("vocabulary %s: %s", size, rows[-1])
    return rows


@dataclass
class AblationArm:
    """One head of a side-by-side run: the head, its compute dtype (bf16 under autocast, else
    float32), the weight of its feature-regression term and its input noise, if not the run's."""

    head: FeatureHead
    dtype: torch.dtype = torch.float32
    reg_weight: float = 0.1
    noise: dict | None = None  # HeadTrainConfig fields this arm overrides (noise, noise_scale)


def heads_ab(
    cfg: HeadTrainConfig,
    corpus: Corpus,
    heldout: dict,
    arms: dict[str, AblationArm],
    tokens: int,
    target=None,
    max_minutes: float | None = None,
    save_dir: Path | None = None,
    curve_every: int = 0,
) -> dict | None:
    """Heads trained side by side on identical records (and noise) for `tokens` answer tokens
    (`arms`: name -> AblationArm): held-out acceptance per draft position, trained tokens/s and,
    given `target`, the head's fast-path step beside the target's. Each step trains every arm on
    the same batch, so the arms stay at equal tokens. The arms train where their heads are (a
    corpus held on that device is collated there). `curve_every`: each arm's held-out acceptance
    per draft position every that many answer tokens too (its `curve`).

    With `save_dir`, resumable: `ablation.pt` there holds every arm's head and optimiser and the
    record stream's state, written every `cfg.ckpt_minutes`, at `max_minutes` and on SIGTERM (the
    call then returns None: call again to go on); when done, each arm's head is written beside it
    (`<n>.safetensors`, n its position in `arms`) for the winner to be trained on."""
    run = SideBySide(cfg, arms, tokens, Path(save_dir) / "ablation.pt" if save_dir is not None else None)
    if not run.train(corpus, heldout, max_minutes, curve_every):
        return None
    return run.report(corpus, heldout, target, save_dir, curve_every)


class SideBySide:
    """The state of `heads_ab`: the arms and their optimisers, the record stream's random state and
    the progress (answer tokens per arm and steps trained, each arm's training seconds and held-out
    curve); `ckpt`, the `ablation.pt` that holds them (None: not resumable), is read back if it exists."""

    def __init__(self, cfg: HeadTrainConfig, arms: dict[str, AblationArm], tokens: int, ckpt: Path | None):
        self.cfg, self.arms, self.tokens, self.ckpt = cfg, arms, tokens, ckpt
        self.optimizers = {n: head_optimizer(a.head, cfg.lr) for n, a in arms.items()}
        self.first = next(iter(arms.values())).head
        self.device = next(self.first.parameters()).device
        self.index, self.rng = full_to_head_index(self.first).to(self.device), random.Random(cfg.seed)
        self.progress = {"trained": 0, "step": 0, "seconds": dict.fromkeys(arms, 0.0), "curve": {n: [] for n in arms}}
        if ckpt is not None and ckpt.exists():
            self.resume()

    def resume(self) -> None:
        """Every arm's head and optimiser, the progress and the random state from `ckpt`; another
        ablation's file (other arms, tokens or vocabulary) is refused."""
        saved = torch.load(self.ckpt, weights_only=False)
        asked = (list(self.arms), self.tokens, self.first.head_ids)
        if (saved["arms"], saved["target_tokens"], saved["head_ids"]) != asked:
            raise ValueError(
                f"{self.ckpt} holds another ablation ({saved['arms']}, {saved['target_tokens']} tokens, or another "
                "vocabulary: the corpus changed); move it away to start this one"
            )
        for n, arm in self.arms.items():
            arm.head.load_state_dict(saved["heads"][n])
            self.optimizers[n].load_state_dict(saved["optimizers"][n])
        self.progress = {"curve": {n: [] for n in self.arms}} | saved["progress"]
        self.rng.setstate(saved["rng"])
        log.info("resumed the ablation at %d answer tokens per arm", self.progress["trained"])

    def save(self) -> None:
        """The state into `ckpt`, written atomically."""
        self.ckpt.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "arms": list(self.arms),
            "target_tokens": self.tokens,
            "head_ids": self.first.head_ids,
            "heads": {n: a.head.state_dict() for n, a in self.arms.items()},
            "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
            "progress": self.progress,
            "rng": self.rng.getstate(),
        }
        torch.save(state, self.ckpt.with_suffix(".tmp"))
        self.ckpt.with_suffix(".tmp").replace(self.ckpt)

    def train(self, corpus: Corpus, heldout: dict, max_minutes: float | None, curve_every: int) -> bool:
        """Steps until `tokens` answer tokens per arm, or `max_minutes` or SIGTERM: True when the arms
        are to be reported (done, or stopped without a checkpoint), False when stopped and saved."""
        from .training_loop import stop_event

        progress = self.progress
        by_family, started, last_save = corpus.by_family(), time.perf_counter(), time.perf_counter()
        stop = stop_event() if self.ckpt is not None else None
        if curve_every and progress["trained"] == 0:  # where each arm starts
            record_curve(self.arms, heldout, progress)
        while progress["trained"] < self.tokens:
            records = sample_batch(by_family, self.cfg.batch_seqs, self.rng)
            done = progress["trained"] / self.tokens  # the share of the run behind it, for the learning rate
            if max_minutes:  # a timed run anneals by the clock when that ends it first
                done = max(done, (time.perf_counter() - started) / (60 * max_minutes))
            before = progress["trained"]
            progress["trained"] += self.step(records, done)
            progress["step"] += 1
            if curve_every and progress["trained"] // curve_every > before // curve_every:
                record_curve(self.arms, heldout, progress)
            if progress["step"] % 20 == 0:
                log.info("%d answer tokens per arm, %.0f s", progress["trained"], time.perf_counter() - started)
            out_of_time = max_minutes is not None and time.perf_counter() - started > 60 * max_minutes
            if progress["trained"] < self.tokens and (out_of_time or (stop is not None and stop.is_set())):
                if self.ckpt is None:
                    break  # not resumable: report the arms where they stand
                self.save()
                log.info("stopped at %d answer tokens per arm; run again to go on", progress["trained"])
                return False
            if self.ckpt is not None and time.perf_counter() - last_save > 60 * self.cfg.ckpt_minutes:
                self.save()
                last_save = time.perf_counter()
        if self.ckpt is not None:
            self.save()
        return True

    def step(self, records: list[dict], done: float) -> int:
        """One optimiser step of every arm on `records` (one collation per kind of features the arms
        read), each arm's seconds counted; `done`: the share of the run behind it. -> the batch's
        answer tokens."""
        batches = {}
        for n, arm in self.arms.items():
            key = feature_key(arm.head)
            if key not in batches:  # identical records, each arm reading the features it is built for
                batches[key] = to_device(collate_features(records, self.cfg.max_len, key), self.device)
            arm_cfg = replace(self.cfg, reg_weight=arm.reg_weight, **(arm.noise or {}))
            sync(self.device)  # an accelerator's queued work (the collation) is not this arm's time
            start = time.perf_counter()
            generator = torch.Generator(self.device).manual_seed(self.progress["step"])
            bf16 = arm.dtype == torch.bfloat16
            step = self.progress["step"]
            optimizer_step(arm.head, self.optimizers[n], batches[key], self.index, arm_cfg, step, generator, bf16, done)
            sync(self.device)
            self.progress["seconds"][n] += time.perf_counter() - start
        return int(next(iter(batches.values()))[3].numel())

    def report(self, corpus: Corpus, heldout: dict, target, save_dir: Path | None, curve_every: int) -> dict:
        """Each arm's held-out acceptance, design, noise, compute dtype and trained tokens/s (its curve
        with `curve_every`; its step beside the target's given `target`); each head written into
        `save_dir` as `<n>.safetensors`."""
        from .draft_measurement import step_ms

        trained, seconds = self.progress["trained"], self.progress["seconds"]
        out = {
            "tokens": trained,
            "target_tokens": self.tokens,
            "corpus_tokens": corpus.answer_tokens,
            "unroll": self.cfg.steps,
            "arms": {},
        }
        target_ms = step_ms(target) if target is not None else None
        for i, (n, arm) in enumerate(self.arms.items()):
            out["arms"][n] = arm_result(self.cfg, arm, heldout, trained / seconds[n])
            if curve_every:
                out["arms"][n]["curve"] = self.progress["curve"][n]
            if save_dir is not None:
                meta = {
                    "trained_tokens": trained,
                    "ablation_arm": n,
                    "train_config": asdict(self.cfg) | {"workdir": None},
                }
                save_head(arm.head, Path(save_dir) / f"{i}.safetensors", extra_meta=meta)
            if target is not None:
                ms = step_ms(target, arm.head.to(target.dtype))
                out["arms"][n] |= {"step_ms": ms, "target_step_ms": target_ms}
            log.info("arm %s after %d tokens: %s", n, trained, out["arms"][n])
        return out


def arm_result(cfg: HeadTrainConfig, arm: AblationArm, heldout: dict, tokens_per_s: float) -> dict:
    """One arm as `heads_ab` reports it: its design, input noise and compute dtype, its held-out
    acceptance per draft position (mean and by family) and its trained tokens/s."""
    stats = evaluate_head(arm.head, heldout)
    return {
        "design": design_of(arm.head) | {"reg_weight": arm.reg_weight},
        "noise": {"noise": cfg.noise, "noise_scale": cfg.noise_scale} | (arm.noise or {}),
        "compute_dtype": dtype_name(arm.dtype),
        "accept_paper": {s: stats["mean"][f"accept_paper@{s}"] for s in range(1, 5)},
        "by_family": {f: stats[f]["accept_paper"] for f in stats if f != "mean"},
        "trained_tokens_per_s": tokens_per_s,
    }


def record_curve(arms: dict[str, AblationArm], heldout: dict, progress: dict) -> None:
    """Each arm's mean held-out acceptance per draft position at the tokens trained so far."""
    for n, arm in arms.items():
        stats = evaluate_head(arm.head, heldout)["mean"]
        point = {"tokens": progress["trained"]} | {s: stats[f"accept_paper@{s}"] for s in range(1, 5)}
        progress["curve"][n].append(point)
        log.info("arm %s at %d tokens: %s", n, progress["trained"], point)


def design_of(head: FeatureHead) -> dict:
    return {"layers": head.num_layers, "fused_depths": head.fused_depths, "own_output": head.own_output}


# what an arm of `design_ablation` leaves unsaid: the fused head without feature loss
ARM_DEFAULTS = dict(layers=1, fused=True, own_output=True, final=False, reg=0.0, noise=None)
# the levers of the fused design, one added at a time (then the depth), on identical records
DESIGN_ARMS = {
    "one depth (today's)": dict(fused=False, own_output=False, reg=0.1, layers=1),
    "+ fused depths": dict(fused=True, own_output=False, reg=0.1, layers=1),
    "+ own output layer": dict(fused=True, own_output=True, reg=0.1, layers=1),
    "- feature loss": dict(fused=True, own_output=True, reg=0.0, layers=1),
    "- feature loss, 2 layers": dict(fused=True, own_output=True, reg=0.0, layers=2),
}


# the fused head's input noise (one layer, own output layer, no feature loss): scaled as the
# design ablation's arms were, by each depth's own scale, or none
NOISE_ARMS = {
    "noise x RMS of the depths together": dict(noise=dict(noise=0.1, noise_scale="row")),
    "noise x each depth's RMS": dict(noise=dict(noise=0.1, noise_scale="depth")),
    "no noise": dict(noise=dict(noise=0.0, noise_scale="depth")),
}
# the fused head's high depth: EAGLE-3's layer L-3, or the final feature the target's LM head reads
# (today's one-depth head beside them, the same records)
HIGH_DEPTH_ARMS = {
    "one depth (today's)": dict(fused=False, own_output=False, reg=0.1),
    "fused, high depth L-3": dict(),
    "fused, high depth final": dict(final=True),
}


def design_ablation(
    cfg: HeadTrainConfig,
    target,
    corpus: Corpus,
    heldout: dict,
    tokens: int,
    ids: list[int],
    arms: dict[str, dict] = DESIGN_ARMS,
    max_minutes: float | None = None,
    save_dir: Path | None = None,
    timed: bool = True,
) -> dict | None:
    """Heads of the designs `arms` from scratch at equal trained tokens on identical records
    (`heads_ab`), one vocabulary for all (`ids`), each in the trainer's compute dtype. An arm's
    `layers`, `fused`, `own_output`, `final`, `reg` and `noise` change the fused head of one layer
    with its own output layer and no feature loss (`ARM_DEFAULTS`). `timed`: each head's step beside
    the target's (the variants of one design leave it unchanged)."""
    built = build_arms(cfg, target, ids, arms)
    timer = {"target": target} if timed else {}
    return heads_ab(cfg, corpus, heldout, built, tokens, max_minutes=max_minutes, save_dir=save_dir, **timer)


def build_arms(cfg: HeadTrainConfig, target, ids: list[int], arms: dict[str, dict]) -> dict[str, AblationArm]:
    """Heads of the designs `arms` from scratch (`ARM_DEFAULTS` fills in what an arm leaves unsaid),
    on the target's device in the trainer's compute dtype."""
    device = next(target.parameters()).device
    dtype = compute_dtype(cfg.compute_dtype, device)
    built = {}
    for name, arm in arms.items():
        a = ARM_DEFAULTS | arm
        design = {k: a[k] for k in ("fused", "own_output", "final")}
        head = build_head(target, a["layers"], ids, seed=cfg.seed, **design).float().to(device)
        built[name] = AblationArm(head, dtype, a["reg"], a["noise"])
    return built


def layers_ab(
    cfg: HeadTrainConfig, target, corpus: Corpus, heldout: dict, layers: tuple[int, ...], tokens: int, ids: list[int]
) -> dict:
    """Heads of each depth in `layers`, from scratch on identical batches (float32 compute)."""
    arms = {
        n: AblationArm(build_head(target, n, ids, seed=cfg.seed).float(), torch.float32, cfg.reg_weight) for n in layers
    }
    return heads_ab(cfg, corpus, heldout, arms, tokens)


def compute_dtype_ab(cfg: HeadTrainConfig, corpus: Corpus, heldout: dict, head: FeatureHead, tokens: int) -> dict:
    """The same head trained in float32 and in bf16 compute (float32 master weights) on identical
    batches: whether bf16 keeps the held-out curve at equal tokens, and what it gains per second."""
    arms = {
        "float32": AblationArm(copy.deepcopy(head).float(), torch.float32, cfg.reg_weight),
        "bfloat16": AblationArm(copy.deepcopy(head).float(), torch.bfloat16, cfg.reg_weight),
    }
    return heads_ab(cfg, corpus, heldout, arms, tokens)


__all__ = [
    "ARM_DEFAULTS",
    "AblationArm",
    "DESIGN_ARMS",
    "build_arms",
    "HIGH_DEPTH_ARMS",
    "NOISE_ARMS",
    "compute_dtype_ab",
    "design_ablation",
    "heads_ab",
    "layers_ab",
    "vocabulary_sweep",
]
