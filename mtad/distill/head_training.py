"""Training a feature head (mtad/models/head.py) on the stored teacher pass.

The producer (`pipeline.produce` with features on) stores per sequence the target's hidden
states at every position (the final one, and the three depths a fused head reads) and its
top-K log-probs at the answer positions; the head never needs the target at training time, so
it runs many epochs over the stored corpus.

Per batch, with the head unrolled `steps` times on its own outputs (training-time test:
step s trains the s-th drafted token as it is used, `FeatureHead.unroll`):

    loss = sum_s  w^(s-1) * [ KL(p' || q_s) + reg * SmoothL1(f^_s, f) ]

p' is the target's distribution processed with the paper's setting (`objectives.kl_paper`:
soft labels over its support), f the target's final feature at the same position. The
regression term is the one-depth design's (its f^ is read through the target's LM head); a
fused head with its own output layer has nothing to predict but q, so its `reg_weight` is 0
unless an ablation asks otherwise. Noise on the input features (uniform, scaled by each depth's RMS)
keeps the head robust to its own imperfect outputs. Batches are balanced over the task
families as for the layer draft.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..decoding.logits import logits_to_probs
from ..decoding.sampling import SAMPLING_PARAMS
from ..models.head import FeatureHead, build_head, load_head, save_head
from .corpus import Corpus
from .objectives import kl_paper, pair_stats
from .pipeline import load_heldout
from .training import choose_head_tokens, full_to_head_index
from .training_loop import BATCHES_BEFORE_TRAINING, train, wait_for_records

log = logging.getLogger(__name__)


@dataclass
class HeadTrainConfig:
    workdir: str
    init_from: str | None = None  # head file to start from when the work dir has no checkpoint
    num_layers: int = 1
    # the fused-depths design (models.head): three target depths by one map, its own output layer
    fused: bool = False
    own_output: bool = False
    # a fused head's high depth: the target's final (normed) feature instead of layer L-3's output
    final_depth: bool = False
    head_size: int = 4096  # restricted vocabulary chosen on the corpus' target mass; 0 = full
    # with init_from: read the loaded head through a new `head_size` vocabulary chosen on the corpus
    # (the head predicts a feature, so any vocabulary can read it) instead of keeping its own
    revocabulary: bool = False
    # bf16 compute (float32 master weights and optimiser) where the device multiplies bf16 natively
    compute_dtype: str = "auto"
    steps: int = 3  # training-time-test unroll
    step_decay: float = 0.8  # weight of step s: decay^(s-1)
    reg_weight: float = 0.1  # feature regression beside the KL (read only by heads on the target's LM head)
    noise: float = 0.1  # uniform noise on input features, times their RMS
    # whose RMS scales the noise: "depth" each depth's own (a fused head's depths differ ~10x in
    # scale), "row" the RMS of the depths side by side; the same for a one-depth head
    noise_scale: str = "depth"
    lr: float = 1e-3
    warmup_steps: int = 50
    # the learning rate's end as a share of `lr`, reached on a cosine over the run (1 = constant);
    # a run of fixed length anneals to it, which a constant rate never settles into
    lr_floor: float = 1.0
    batch_seqs: int = 8
    max_len: int = 512  # sequence positions kept (the last ones: the answer and the prompt's end)
    eval_every_tokens: int = 100_000
    ckpt_minutes: float = 5.0
    max_minutes: float = 60.0
    max_train_tokens: int = 10**12
    threads: int = 1
    seed: int = 0


def corpus_mass(records: list[dict], vocab: int, processed: bool = False) -> torch.Tensor:
    """[V] the target's probability summed over every stored answer position (top-K only);
    `processed`: of p' (the paper's setting), the distribution acceptance compares q against.
    Summed where the records live (a corpus held on an accelerator), returned on the CPU."""
    device = records[0]["top_ids"].device if records else torch.device("cpu")
    mass = torch.zeros(vocab, dtype=torch.float64, device=device)
    for r in records:
        lp = r["top_logprobs"].float()
        probs = logits_to_probs(lp, **SAMPLING_PARAMS) if processed else lp.exp()
        mass.index_add_(0, r["top_ids"].long().flatten(), probs.double().flatten())
    return mass.cpu()


FINAL = "final"  # a feature key's name for the stored final (normed) feature


def feature_key(head: FeatureHead) -> tuple[str | int, ...]:
    """The stored features a head reads, one entry per depth it declares: FINAL for the final
    feature ("features"), i for the i-th of the three depths stored side by side
    ("depth_features", `fused_depths(L)` in order). A fused head's i-th depth is the stored i-th,
    or the final feature where it declares -1 (`fused_depths(L, final=True)`)."""
    if not head.fused_depths:
        return (FINAL,)
    return tuple(FINAL if d == -1 else i for i, d in enumerate(head.fused_depths))


def stored_features(record: dict, key: tuple[str | int, ...]) -> torch.Tensor:
    """[P + n, D*H] the stored features `key` names, side by side (`feature_key`)."""
    final = record["features"]
    H = final.shape[-1]
    parts = [final if k == FINAL else record["depth_features"][:, k * H : (k + 1) * H] for k in key]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def collate_features(records: list[dict], max_len: int, key: tuple[str | int, ...] = (FINAL,)) -> tuple:
    """Left-padded ids [B, T], the target's features the head reads [B, T, D*H] (`key`:
    `feature_key`; float32), valid [B, T], the answer positions (rows,
    cols [N]: the row before answer token j predicts it), the target's top-K there (ids,
    log-probs [N, K]) and the final features [B, T, H] (what the regression term reads).
    Sequences longer than max_len lose their first positions. Left padding ends every answer
    at T, so the unrolled steps run on the last rows only. The batch is built where the records'
    tensors live (the CPU, or an accelerator holding the whole corpus)."""
    seqs, feats, finals, answers = [], [], [], []
    for r in records:
        seq = torch.cat([r["prompt_ids"], r["answer_ids"]]).long()
        drop = max(0, len(seq) - max_len)
        seqs.append(seq[drop:])
        feats.append(stored_features(r, key)[drop:].float())
        finals.append(r["features"][drop:].float())
        answers.append((len(r["prompt_ids"]) - drop, len(r["answer_ids"])))
    B, T, device = len(seqs), max(len(s) for s in seqs), feats[0].device
    ids = torch.zeros(B, T, dtype=torch.long, device=device)
    features = torch.zeros(B, T, feats[0].shape[-1], device=device)
    final = torch.zeros(B, T, finals[0].shape[-1], device=device)
    valid = torch.zeros(B, T, dtype=torch.bool, device=device)
    rows, cols, keep = [], [], []
    for b, (s, f, (P, n)) in enumerate(zip(seqs, feats, answers)):
        pad = T - len(s)
        ids[b, pad:], features[b, pad:], final[b, pad:], valid[b, pad:] = s, f, finals[b], True
        start = max(P - 1, 0)  # a cut prompt may have lost the position before the first answer token
        rows.append(torch.full((P - 1 + n - start,), b, device=device))
        cols.append(pad + torch.arange(start, P - 1 + n, device=device))
        keep.append(torch.arange(start - (P - 1), n, device=device))
    top_ids = torch.cat([r["top_ids"].long()[k] for r, k in zip(records, keep)])
    top_lp = torch.cat([r["top_logprobs"][k] for r, k in zip(records, keep)])
    return ids, features, valid, torch.cat(rows), torch.cat(cols), top_ids, top_lp, final


def to_device(batch: tuple, device: torch.device) -> tuple:
    """A collated batch on the head's device (collation runs on the CPU, where the corpus lives)."""
    return tuple(t.to(device, non_blocking=True) for t in batch)


def input_noise(
    features: torch.Tensor, depths: int, cfg: HeadTrainConfig, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Uniform noise in [-noise, noise] times an RMS, per position (features [B, T, D*H], the D
    depths side by side): each depth's own RMS (`noise_scale` "depth"), or the RMS of all D at once
    ("row"). The depths a fused head reads differ in scale (SmolLM2's residual stream grows ~10x
    from layer 2 to layer 27), so one RMS over all of them drowns the low depth in noise."""
    where = generator.device if generator is not None else features.device  # the same draws on a CPU generator
    u = (torch.rand(features.shape, generator=generator, device=where).to(features.device) - 0.5) * 2 * cfg.noise
    if cfg.noise_scale not in ("depth", "row"):
        raise ValueError(f"noise_scale {cfg.noise_scale!r}: valid are 'depth' and 'row'")
    groups = depths if cfg.noise_scale == "depth" else 1
    split = features.unflatten(-1, (groups, -1))  # [B, T, groups, D*H/groups]
    rms = split.pow(2).mean(-1, keepdim=True).sqrt()
    return (u.unflatten(-1, (groups, -1)) * rms).flatten(-2)


def head_loss(
    head: FeatureHead, batch: tuple, index: torch.Tensor, cfg: HeadTrainConfig, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, list[float]]:
    """The unrolled loss of one batch and each step's KL (for the log)."""
    ids, features, valid, rows, cols, top_ids, top_lp, final = batch
    noisy = features + input_noise(features, len(head.target_depths), cfg, generator)
    first = max(int(cols.min()) - cfg.steps, 0)  # later steps only where the loss reads them
    predicted = head.unroll(ids, noisy, cfg.steps, first_row=first, valid=valid)  # steps x [B, T, H]
    total, kls = 0.0, []
    for s, f_hat in enumerate(predicted):
        logq = torch.log_softmax(head.head_logits(f_hat[rows, cols]).float(), dim=-1)  # [N, |head|]
        kl = kl_paper(logq, top_ids, top_lp, index)
        step_loss = kl
        if cfg.reg_weight:
            on = valid.clone()
            on[:, : first + s] &= s == 0  # step s+1 is exact from row first + s on
            step_loss = kl + cfg.reg_weight * F.smooth_l1_loss(f_hat[on], final[on])
        total = total + cfg.step_decay**s * step_loss
        kls.append(float(kl.detach()))
    return total, kls


@torch.no_grad()
def unrolled_distributions(head: FeatureHead, records: list[dict], steps: int = 4, max_len: int = 512):
    """Per held-out record and draft position s = 1..steps (s = 1: the first drafted token, read
    from the target's features; s > 1: from the head's own outputs): the target's logits p
    (its stored top-K, -inf elsewhere) and the head's q at the answer positions, [N, V] each."""
    head.eval()
    device = next(head.parameters()).device
    for r in records:
        batch = to_device(collate_features([r], max_len, feature_key(head)), device)
        ids, features, _, rows, cols, top_ids, top_lp, _ = batch
        p_logits = torch.full((len(rows), head.vocab_size), float("-inf"), device=device)
        p_logits = p_logits.scatter(-1, top_ids, top_lp.float())
        first = max(int(cols.min()) - steps, 0)
        for s, f_hat in enumerate(head.unroll(ids, features.to(head.dtype), steps, first), start=1):
            yield s, p_logits, head.expand_logits(head.head_logits(f_hat[rows, cols])).float()


@torch.no_grad()
def evaluate_head(head: FeatureHead, heldout: dict[str, list[dict]], steps: int = 4, max_len: int = 512) -> dict:
    """Per family and draft position s = 1..steps (`unrolled_distributions`): argmax agreement
    with the target and the expected SpS acceptance sum_x min(p', q') at T = 1 and at the paper's
    setting, on held-out target answers (p from the stored top-K, as `training.evaluate`)."""
    out = {}
    for family, records in heldout.items():
        sums, count = {}, 0
        for s, p_logits, q_logits in unrolled_distributions(head, records, steps, max_len):
            for key, val in pair_stats(p_logits, q_logits).items():
                sums[f"{key}@{s}"] = sums.get(f"{key}@{s}", 0.0) + float(val.sum())
            count += len(p_logits) if s == 1 else 0
        out[family] = {k: v / max(count, 1) for k, v in sums.items()} | {"positions": count}
    families = [f for f in out if out[f]["positions"]]
    keys = [k for k in out[families[0]] if k != "positions"] if families else []
    out["mean"] = {k: sum(out[f][k] for f in families) / len(families) for k in keys}
    for part in out.values():  # the first drafted token, under the layer draft's names
        for key in ("argmax_agree", "accept_t1", "accept_paper"):
            if f"{key}@1" in part:
                part[key] = part[f"{key}@1"]
    return out


CONFIDENCE_EDGES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


@torch.no_grad()
def confidence_calibration(
    head: FeatureHead, heldout: dict[str, list[dict]], steps: int = 4, edges=CONFIDENCE_EDGES, max_len: int = 512
) -> dict:
    """How far the head's confidence in a drafted token predicts its acceptance, per draft position.

    A token x drafted from q' (the head's distribution at the paper's setting) is accepted by
    speculative sampling with probability min(1, p'(x) / q'(x)). Over every held-out answer
    position and every x in q''s support, weighted by q'(x) (how often it is drafted), binned by
    the confidence q'(x): the share of drafted tokens in each bin, their mean confidence and their
    acceptance rate; exact expectations, no sampling. Rows: {position: [bin, ...]}."""
    bins = len(edges) - 1
    edges_t = torch.tensor(edges, dtype=torch.float64)
    drafted = torch.zeros(steps, bins, dtype=torch.float64)
    confidence, accepted = torch.zeros_like(drafted), torch.zeros_like(drafted)
    records = [r for rs in heldout.values() for r in rs]
    for s, p_logits, q_logits in unrolled_distributions(head, records, steps, max_len):
        p = logits_to_probs(p_logits, **SAMPLING_PARAMS).double()
        q = logits_to_probs(q_logits, **SAMPLING_PARAMS).double()
        k = min(int((q > 0).sum(-1).max()), q.shape[-1])
        qv, qi = q.topk(k, dim=-1)  # [N, k]: q''s support (top-k keeps at most k tokens)
        accept = torch.minimum(torch.ones_like(qv), p.gather(-1, qi) / qv.clamp_min(1e-300))
        on = qv > 0
        b = (torch.bucketize(qv[on], edges_t, right=True) - 1).clamp(0, bins - 1)
        drafted[s - 1].index_add_(0, b, qv[on])
        confidence[s - 1].index_add_(0, b, qv[on] * qv[on])
        accepted[s - 1].index_add_(0, b, qv[on] * accept[on])
    out = {}
    for s in range(steps):
        total = float(drafted[s].sum())
        out[s + 1] = [
            {
                "bin": [edges[i], edges[i + 1]],
                "drafted_share": float(drafted[s, i]) / total if total else 0.0,
                "mean_confidence": float(confidence[s, i] / drafted[s, i]) if drafted[s, i] else None,
                "acceptance": float(accepted[s, i] / drafted[s, i]) if drafted[s, i] else None,
            }
            for i in range(bins)
        ]
    return {"positions": steps, "edges": list(edges), "rows": out}


def optimizer_step(
    head: FeatureHead,
    optimizer: torch.optim.Optimizer,
    batch: tuple,
    index: torch.Tensor,
    cfg: HeadTrainConfig,
    step: int,
    generator: torch.Generator | None,
    bf16: bool,
    done: float = 0.0,
) -> list[float]:
    """One AdamW step of the unrolled loss at `learning_rate(cfg, step, done)` (`done`: the share of
    the run behind it), gradients clipped to norm 1, the forward under bf16 autocast when `bf16`;
    each unrolled step's KL, for the log."""
    head.train()
    with torch.autocast(next(head.parameters()).device.type, dtype=torch.bfloat16, enabled=bf16):
        loss, kls = head_loss(head, batch, index, cfg, generator)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(cfg, step, done)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    optimizer.step()
    return kls


def learning_rate(cfg: HeadTrainConfig, step: int, done: float) -> float:
    """Linear warm-up over `cfg.warmup_steps`, then a cosine from `cfg.lr` to `cfg.lr_floor` x it as
    `done` (the share of the run behind this step) goes from 0 to 1."""
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    anneal = cfg.lr_floor + (1.0 - cfg.lr_floor) * 0.5 * (1.0 + math.cos(math.pi * min(max(done, 0.0), 1.0)))
    return cfg.lr * warm * anneal


def compute_dtype(name: str, device: torch.device) -> torch.dtype:
    """The trainer's compute dtype: "auto" is bf16 where the device multiplies it natively (the
    pairs' `auto_dtype`), else float32; master weights and the optimiser stay float32 either way."""
    from ..models.pairs import auto_dtype

    resolved = auto_dtype(device) if name == "auto" else name
    if resolved not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"compute_dtype {name!r}; valid: auto, bfloat16, float32")
    return torch.bfloat16 if resolved == "bfloat16" else torch.float32


def head_optimizer(head: FeatureHead, lr: float) -> torch.optim.Optimizer:
    """AdamW over the head's own parameters (the target's embedding and LM-head rows stay frozen)."""
    return torch.optim.AdamW(
        [p for p in head.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.95), weight_decay=0.0
    )


class HeadTrainer:
    """The feature head's arm of `training_loop.train`. Resumable: checkpoint.pt (head, optimiser,
    state) every few minutes and on SIGTERM; the head file head.safetensors beside it; held-out
    statistics appended to curve.jsonl."""

    def __init__(self, cfg: HeadTrainConfig, target, special_ids: list[int] = ()):
        self.cfg, self.target, self.special_ids = cfg, target, list(special_ids)
        self.workdir = Path(cfg.workdir)
        self.corpus = Corpus(self.workdir)
        self.rng = random.Random(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.state = {"step": 0, "trained_tokens": 0, "runs": []}

    def run(self) -> None:
        train(self)

    def build(self, saved: dict | None) -> None:
        if saved is not None:
            self.state = saved["state"]
            design = {k: saved.get(k, False) for k in ("fused", "own_output", "final")}
            self.head = build_head(self.target, saved["num_layers"], saved["head_token_ids"], **design).float()
            self.head.load_state_dict(saved["head"])
            self.optimizer = head_optimizer(self.head, self.cfg.lr)
            self.optimizer.load_state_dict(saved["optimizer"])
            if "noise_generator" in saved:  # the noise goes on where it stopped
                self.generator.set_state(saved["noise_generator"])
            log.info("resumed at step %d, %d trained tokens", self.state["step"], self.state["trained_tokens"])
            return
        if self.cfg.init_from:
            self.head = load_head(self.cfg.init_from, self.target, dtype=torch.float32)
            if self.cfg.revocabulary:
                ids = self._head_vocabulary() if self.cfg.head_size else None
                self.head = with_vocabulary(self.head, self.target, ids).float()
        else:
            ids = self._head_vocabulary() if self.cfg.head_size else None
            design = {"fused": self.cfg.fused, "own_output": self.cfg.own_output, "final": self.cfg.final_depth}
            self.head = build_head(self.target, self.cfg.num_layers, ids, seed=self.cfg.seed, **design).float()
        self.optimizer = head_optimizer(self.head, self.cfg.lr)

    def _head_vocabulary(self) -> list[int]:
        """The `head_size` tokens of most target mass over the first chunks of the corpus."""
        wait_for_records(self.corpus, BATCHES_BEFORE_TRAINING * self.cfg.batch_seqs)
        # chosen by p' (what acceptance compares q against), not by the raw distribution
        mass = corpus_mass(self.corpus.records, self.target.config.vocab_size, processed=True)
        ids = choose_head_tokens(mass, self.cfg.head_size, self.special_ids)
        self.state["head_mass_coverage"] = float(mass[ids].sum() / mass.sum())
        return ids

    def checkpoint(self) -> dict:
        return {
            "num_layers": self.head.num_layers,
            "head_token_ids": self.head.head_ids,
            "fused": bool(self.head.fused_depths),
            "final": -1 in (self.head.fused_depths or ()),
            "own_output": self.head.own_output,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "noise_generator": self.generator.get_state(),
            "state": self.state,
        }

    def export(self) -> None:
        meta = {
            "trained_tokens": self.state["trained_tokens"],
            "steps": self.state["step"],
            "train_config": asdict(self.cfg) | {"workdir": None},
        }
        save_head(self.head, self.workdir / "head.safetensors", extra_meta=meta)

    def heldout(self) -> dict[str, list[dict]]:
        return load_heldout(self.workdir)

    def start(self) -> None:
        self.device = next(self.head.parameters()).device
        self.index = full_to_head_index(self.head).to(self.device)
        # autocast lowers float32 only (a float64 head, as in the exactness tests, stays as it is)
        self.bf16 = (
            compute_dtype(self.cfg.compute_dtype, self.device) == torch.bfloat16 and self.head.dtype == torch.float32
        )
        self.state["runs"][-1]["compute_dtype"] = "bfloat16" if self.bf16 else "float32"
        self.kls: list[list[float]] = []

    def step(self, records: list[dict]) -> int:
        # outside autocast: collation concatenates the fp16 stores
        batch = to_device(collate_features(records, self.cfg.max_len, feature_key(self.head)), self.device)
        self.kls.append(
            optimizer_step(
                self.head, self.optimizer, batch, self.index, self.cfg, self.state["step"], self.generator, self.bf16
            )
        )
        return 1

    def window(self, rate: float) -> tuple[dict, str]:
        mean_kls = [round(sum(k[s] for k in self.kls) / len(self.kls), 4) for s in range(self.cfg.steps)]
        self.kls = []
        row = {"step": self.state["step"], "trained_tokens_per_s": rate, "kl_per_step": mean_kls}
        return row, f"KL per unrolled step {mean_kls}"

    def evaluate(self, heldout) -> list[tuple[str, str, dict]]:
        stats = evaluate_head(self.head, heldout, max_len=self.cfg.max_len)
        log.info(
            "eval at %d tokens: accept@1 %s, mean accept@1..4 %s",
            self.state["trained_tokens"],
            {f: round(s["accept_paper"], 3) for f, s in stats.items()},
            [round(stats["mean"][f"accept_paper@{s}"], 3) for s in range(1, 5)],
        )
        return [("head", "kl_paper+ttt", stats)]

    def after_step(self, heldout) -> bool:
        return False


def with_vocabulary(head: FeatureHead, target, head_token_ids: list[int] | None) -> FeatureHead:
    """The same trained head read through another set of the target's LM-head rows (None: all):
    the head predicts a feature, so any vocabulary can read it; only the cost and q change."""
    other = FeatureHead(
        head.config, target.get_input_embeddings(), target.get_output_embeddings().weight, head_token_ids
    )
    other.load_state_dict(head.state_dict())
    return other.to(head.dtype).eval()


__all__ = [
    "HeadTrainConfig",
    "HeadTrainer",
    "collate_features",
    "evaluate_head",
    "head_loss",
    "compute_dtype",
    "confidence_calibration",
    "feature_key",
    "stored_features",
    "head_optimizer",
    "input_noise",
    "optimizer_step",
    "to_device",
    "with_vocabulary",
]
