"""Distil a layer-subset draft from its target: KL(p || q) on text the target writes itself.

One resumable loop, in one thread so that other work keeps a core:
1. *Generate* a chunk of chat answers with the target (batched sampling from varied prompts,
   see `prompts.py`; settings rotate between temperature 1, the paper's top-k 10 / top-p 0.9
   and temperature 0.7). For every answer position we store the target's top-K log-probs,
   so training never runs the target again. Chunks are kept on disk (the corpus cache).
2. *Train* the draft (its layers, final norm and head) on random sequences from the cache:
   loss = KL(p~ || q) at answer positions, p~ = the target's top-K distribution restricted
   to the draft head's tokens and renormalised (the head cannot put mass elsewhere, and the
   constant outside-mass term has no gradient).
3. Every few minutes: checkpoint (draft + optimiser + counters) and export the draft file;
   periodically evaluate on held-out prompts (argmax agreement, estimated SpS acceptance at
   temperature 1 and at top-k 10 / top-p 0.9) and append to `curve.jsonl`.
Restarting with the same work directory continues where it stopped; tokens accumulate.
"""
from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .draft import LlamaDraftForCausalLM, build_draft_from_target, save_draft
from .prompts import make_prompts, summary_prompt

log = logging.getLogger(__name__)

# Generation settings rotated across chunks: (temperature, top_k, top_p).
GEN_SETTINGS = [(1.0, 0, 1.0), (1.0, 10, 0.9), (0.7, 0, 1.0)]


@dataclass
class DistillConfig:
    workdir: str
    layers: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    head_size: int = 8192  # 0 = full-vocabulary (tied-copy) head
    lr: float = 4e-4
    lr_final_fraction: float = 1.0  # linear decay over this run's max_minutes down to lr * this (1 = constant)
    warmup_steps: int = 20
    batch_seqs: int = 8
    gen_batch: int = 32
    max_new_tokens: int = 160
    store_top_k: int = 64
    train_per_gen: float = 2.0  # trained tokens per generated token before generating more
    summaries_per_chunk: int = 4
    heldout_seqs: int = 24
    eval_every_tokens: int = 40_000
    ckpt_minutes: float = 5.0
    max_train_tokens: int = 10**9
    max_minutes: float = 10**6
    threads: int = 1
    seed: int = 0
    init_from: str | None = None  # a draft file to continue from when the work dir has no checkpoint


# ----------------------------------------------------------------------------- corpus


def _chat_ids(tokenizer, prompts: list[str]) -> dict:
    messages = [[{"role": "user", "content": p}] for p in prompts]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True
    )


@torch.no_grad()
def generate_chunk(target, tokenizer, prompts: list[str], setting: tuple, max_new_tokens: int, top_k_store: int, seed: int) -> dict:
    """Sample answers for `prompts`; keep ids and the target's top-K log-probs at answer positions."""
    temperature, top_k, top_p = setting
    tokenizer.padding_side = "left"
    enc = _chat_ids(tokenizer, prompts)
    torch.manual_seed(seed)
    out = target.generate(
        **enc, do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
        max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    prompt_len = enc["input_ids"].shape[1]
    logits = torch.stack(out.logits, dim=1).float()  # [B, n_new, V], raw (temperature 1) logits
    eos = tokenizer.eos_token_id
    records, mass = [], torch.zeros(logits.shape[-1], dtype=torch.float64)
    for b in range(len(prompts)):
        prompt_ids = enc["input_ids"][b][enc["attention_mask"][b].bool()]
        answer = out.sequences[b, prompt_len:]
        stop = (answer == eos).nonzero()
        n = int(stop[0]) + 1 if len(stop) else len(answer)  # keep the EOS position itself
        logprobs = torch.log_softmax(logits[b, :n], dim=-1)  # [n, V]
        mass += logprobs.exp().sum(0).double()
        top = logprobs.topk(top_k_store, dim=-1)
        records.append({
            "prompt": prompts[b], "setting": setting,
            "prompt_ids": prompt_ids.to(torch.int32), "answer_ids": answer[:n].to(torch.int32),
            "top_ids": top.indices.to(torch.int32), "top_logprobs": top.values.to(torch.float16),
        })
    return {"records": records, "mass": mass}


class Corpus:
    """The on-disk cache of generated chunks (`corpus/chunk_XXXXX.pt`) and the held-out set."""

    def __init__(self, workdir: Path):
        self.dir = workdir / "corpus"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = []
        self.mass = None
        self.n_chunks = 0
        for path in sorted(self.dir.glob("chunk_*.pt")):
            self._add(torch.load(path, weights_only=False))

    def _add(self, chunk: dict) -> None:
        self.records.extend(chunk["records"])
        self.mass = chunk["mass"].clone() if self.mass is None else self.mass + chunk["mass"]
        self.n_chunks += 1

    def add_chunk(self, chunk: dict) -> None:
        path = self.dir / f"chunk_{self.n_chunks:05d}.pt"
        torch.save(chunk, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
        self._add(chunk)

    @property
    def answer_tokens(self) -> int:
        return sum(len(r["answer_ids"]) for r in self.records)


def choose_head_tokens(mass: torch.Tensor, size: int, tokenizer) -> list[int]:
    """The `size` tokens with most expected target mass on the corpus, plus all special tokens;
    ties and unseen tokens are filled in id order (BPE ids roughly follow merge frequency)."""
    vocab = mass.numel()
    special = set(tokenizer.all_special_ids) | {tokenizer.eos_token_id}
    score = mass.clone()
    score += torch.linspace(1e-9, 0, vocab, dtype=score.dtype)  # tie-break towards low ids
    ranked = score.argsort(descending=True).tolist()
    chosen = set(i for i in special if i is not None and 0 <= i < vocab)
    for i in ranked:
        if len(chosen) >= size:
            break
        chosen.add(i)
    return sorted(chosen)


# ----------------------------------------------------------------------------- training


def _batch(records: list[dict], device) -> tuple:
    """Right-padded ids [B, T], mask [B, T], and the flat answer-position targets."""
    seqs = [torch.cat([r["prompt_ids"], r["answer_ids"]]).long() for r in records]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    rows, cols, top_ids, top_lp = [], [], [], []
    for b, (s, r) in enumerate(zip(seqs, records)):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = 1
        P, n = len(r["prompt_ids"]), len(r["answer_ids"])
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(P - 1, P - 1 + n))  # logits at P-1+j predict answer token j
        top_ids.append(r["top_ids"].long())
        top_lp.append(r["top_logprobs"].float())
    return (ids.to(device), mask.to(device), torch.cat(rows).to(device), torch.cat(cols).to(device),
            torch.cat(top_ids).to(device), torch.cat(top_lp).to(device))


def full_to_head_index(draft: LlamaDraftForCausalLM) -> torch.Tensor:
    """[V] map from a vocabulary id to its head column, -1 when the head lacks it."""
    index = torch.full((draft.vocab_size,), -1, dtype=torch.long)
    if draft.is_restricted:
        index[draft.head_token_ids.cpu()] = torch.arange(len(draft.head_token_ids))
    else:
        index = torch.arange(draft.vocab_size)
    return index


def draft_head_logprobs(draft, ids, mask, rows, cols) -> torch.Tensor:
    """Draft log q over its head's tokens at the given positions: [N, |head|]."""
    hidden = draft.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state  # [B, T, H]
    return torch.log_softmax(draft.head_logits(hidden[rows, cols]).float(), dim=-1)


def kl_loss(logq: torch.Tensor, top_ids: torch.Tensor, top_logprobs: torch.Tensor, head_index: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(p~ || q); p~ = target top-K restricted to the head, renormalised."""
    cols = head_index[top_ids]  # [N, K], -1 where the head lacks the token
    in_head = cols >= 0
    p = top_logprobs.exp() * in_head  # [N, K]
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    logq_at = logq.gather(-1, cols.clamp_min(0))  # [N, K]
    kl = (p * (torch.log(p.clamp_min(1e-12)) - logq_at)).sum(-1)  # [N]
    return kl.mean()


def train_step(draft, optimizer, records, head_index, device, autocast_dtype=torch.bfloat16) -> float:
    ids, mask, rows, cols, top_ids, top_lp = _batch(records, device)
    draft.train()
    with torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logq = draft_head_logprobs(draft, ids, mask, rows, cols)
    loss = kl_loss(logq, top_ids, top_lp, head_index.to(device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in draft.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    draft.eval()
    return float(loss.detach())


def trainable_parameters(draft: LlamaDraftForCausalLM) -> list[torch.nn.Parameter]:
    """Layers, final norm and (restricted) head; the shared embedding stays frozen."""
    draft.model.embed_tokens.weight.requires_grad_(False)
    if not draft.is_restricted:
        draft.lm_head.weight.requires_grad_(False)  # full head = the target's tied embedding
    return [p for p in draft.parameters() if p.requires_grad]


# ----------------------------------------------------------------------------- evaluation


def process_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Probabilities after temperature, then top-k, then top-p (smallest set reaching top_p)."""
    logits = logits.float() / max(temperature, 1e-8)
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def pair_stats(p_logits: torch.Tensor, q_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-position agreement statistics between target and draft logits [N, V].

    SpS accepts a drafted token with expected probability sum_x min(p(x), q(x)) = 1 - TV(p, q),
    so that sum is the per-token acceptance rate (before any prefix effects)."""
    stats = {"argmax_agree": (p_logits.argmax(-1) == q_logits.argmax(-1)).float()}
    for tag, (k, tp) in {"t1": (0, 1.0), "paper": (10, 0.9)}.items():
        p, q = process_probs(p_logits, 1.0, k, tp), process_probs(q_logits, 1.0, k, tp)
        stats[f"accept_{tag}"] = torch.minimum(p, q).sum(-1)
    return stats


@torch.no_grad()
def evaluate_on_topk(draft, records: list[dict], device) -> dict[str, float]:
    """Held-out statistics with p rebuilt from the stored top-K (exact for top-10 / argmax;
    at temperature 1 the mass beyond K is treated as absent, a small underestimate)."""
    sums, count = {}, 0
    for r in records:
        ids, mask, rows, cols, top_ids, top_lp = _batch([r], device)
        hidden = draft.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        q_logits = draft.expand_logits(draft.head_logits(hidden[rows, cols])).float()  # [n, V]
        p_logits = torch.full_like(q_logits, float("-inf")).scatter(-1, top_ids, top_lp)
        for key, val in pair_stats(p_logits, q_logits).items():
            sums[key] = sums.get(key, 0.0) + float(val.sum())
        count += len(rows)
    return {k: v / max(count, 1) for k, v in sums.items()} | {"positions": count}


# ----------------------------------------------------------------------------- the loop


class Distiller:
    def __init__(self, cfg: DistillConfig, target, tokenizer, gen_target=None):
        self.cfg = cfg
        self.workdir = Path(cfg.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.target, self.tokenizer = target, tokenizer
        self.gen_target = gen_target or target
        self.device = next(target.parameters()).device
        self.corpus = Corpus(self.workdir)
        self.rng = random.Random(cfg.seed)
        self.state = {"step": 0, "trained_tokens": 0, "losses": [], "config": asdict(cfg)}
        self.draft = None
        self.optimizer = None

    # -- corpus
    def _new_prompts(self) -> list[str]:
        chunk = self._chunk_seed()
        prompts = make_prompts(self.cfg.gen_batch, seed=self.cfg.seed * 100_003 + chunk)
        articles = [r for r in self.corpus.records if "news article" in r["prompt"] and len(r["answer_ids"]) > 80]
        rng = random.Random(chunk)
        for i in range(min(self.cfg.summaries_per_chunk, len(articles))):
            text = self.tokenizer.decode(rng.choice(articles)["answer_ids"].tolist(), skip_special_tokens=True)
            prompts[i] = summary_prompt(text)
        return prompts

    def _chunk_seed(self) -> int:
        """New chunks get new prompts and samples, also after continuing from a draft file."""
        return self.state.get("seed_offset", 0) + self.corpus.n_chunks

    def generate_more(self) -> None:
        setting = GEN_SETTINGS[self.corpus.n_chunks % len(GEN_SETTINGS)]
        t0 = time.time()
        chunk = generate_chunk(self.gen_target, self.tokenizer, self._new_prompts(), setting,
                               self.cfg.max_new_tokens, self.cfg.store_top_k, seed=self._chunk_seed())
        self.corpus.add_chunk(chunk)
        n = sum(len(r["answer_ids"]) for r in chunk["records"])
        log.info("chunk %d: %d answer tokens in %.0fs (%s); corpus %d tokens", self.corpus.n_chunks, n,
                 time.time() - t0, setting, self.corpus.answer_tokens)

    def heldout(self) -> list[dict]:
        path = self.workdir / "heldout.pt"
        if not path.exists():
            prompts = make_prompts(self.cfg.heldout_seqs, seed=self.cfg.seed + 1, held_out=True)
            chunk = generate_chunk(self.gen_target, self.tokenizer, prompts, GEN_SETTINGS[1],
                                   self.cfg.max_new_tokens, self.cfg.store_top_k, seed=10**6)
            torch.save(chunk, path)
        return torch.load(path, weights_only=False)["records"]

    # -- draft and checkpoint
    def _build_or_resume(self) -> None:
        ckpt = self.workdir / "checkpoint.pt"
        if ckpt.exists():
            saved = torch.load(ckpt, weights_only=False)
            head = saved["head_token_ids"]
            self.draft = build_draft_from_target(self.target, saved["layers"], head).float()
            self.draft.load_state_dict(saved["draft"], strict=False)
            self.optimizer = torch.optim.AdamW(trainable_parameters(self.draft), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.state = saved["state"]
            log.info("resumed at step %d, %d trained tokens", self.state["step"], self.state["trained_tokens"])
            return
        if self.cfg.init_from and Path(self.cfg.init_from).is_file():
            from .draft import load_draft, read_draft_meta

            meta = read_draft_meta(self.cfg.init_from)
            self.draft = load_draft(self.cfg.init_from, self.target).float()
            self.optimizer = torch.optim.AdamW(trainable_parameters(self.draft), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
            tokens, steps = int(meta.get("trained_tokens", 0)), int(meta.get("steps", 0))
            self.state.update(step=steps, trained_tokens=tokens, seed_offset=tokens, opt_start_step=steps,
                              warm_start=str(self.cfg.init_from))
            log.info("continuing from draft file %s (%d trained tokens, new optimiser)", self.cfg.init_from, tokens)
            return
        head = None
        if self.cfg.head_size:
            while self.corpus.n_chunks < 2:
                self.generate_more()
            head = choose_head_tokens(self.corpus.mass, self.cfg.head_size, self.tokenizer)
            covered = float(self.corpus.mass[head].sum() / self.corpus.mass.sum())
            self.state["head_mass_coverage"] = covered
            log.info("restricted head: %d tokens cover %.4f of the target's mass on the corpus", len(head), covered)
        self.draft = build_draft_from_target(self.target, self.cfg.layers, head).float()
        self.optimizer = torch.optim.AdamW(trainable_parameters(self.draft), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)

    def checkpoint(self) -> None:
        trainable = {n for n, p in self.draft.named_parameters() if p.requires_grad}
        saved = {
            "layers": list(self.draft.config.draft_source_layers),
            "head_token_ids": list(self.draft.config.draft_head_token_ids) if self.draft.is_restricted else None,
            "draft": {k: v for k, v in self.draft.state_dict().items() if k in trainable},
            "optimizer": self.optimizer.state_dict(),
            "state": self.state,
        }
        path = self.workdir / "checkpoint.pt"
        torch.save(saved, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
        meta = {"trained_tokens": self.state["trained_tokens"], "steps": self.state["step"]}
        save_draft(self.draft, self.workdir / "draft.safetensors", extra_meta=meta)
        (self.workdir / "state.json").write_text(json.dumps({k: v for k, v in self.state.items() if k != "losses"}, indent=1))

    def _lr(self, run_fraction: float = 0.0) -> float:
        """Warm-up after a fresh optimiser, then a linear decay over this run (anneals each run)."""
        step = self.state["step"] - self.state.get("opt_start_step", 0)
        decay = 1.0 - (1.0 - self.cfg.lr_final_fraction) * min(1.0, run_fraction)
        return self.cfg.lr * min(1.0, (step + 1) / self.cfg.warmup_steps) * decay

    def evaluate(self, heldout) -> dict:
        stats = evaluate_on_topk(self.draft, heldout, self.device)
        row = {"trained_tokens": self.state["trained_tokens"], "step": self.state["step"],
               "corpus_tokens": self.corpus.answer_tokens, "time": time.time()} | stats
        with open(self.workdir / "curve.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        log.info("eval %s", {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
        return row

    def run(self) -> LlamaDraftForCausalLM:
        torch.set_num_threads(self.cfg.threads)
        t_start = time.time()
        self._build_or_resume()
        # the card reports the latest run's settings and the history of runs that made the draft
        self.state["config"] = asdict(self.cfg)
        self.state.setdefault("runs", []).append({
            "from_tokens": self.state["trained_tokens"], "lr": self.cfg.lr, "lr_final_fraction": self.cfg.lr_final_fraction,
            "train_per_gen": self.cfg.train_per_gen, "gen_batch": self.cfg.gen_batch, "max_minutes": self.cfg.max_minutes})
        heldout = self.heldout()
        if self.state["step"] == 0:
            self.evaluate(heldout)
        head_index = full_to_head_index(self.draft)
        last_ckpt, next_eval = time.time(), self.state["trained_tokens"] + self.cfg.eval_every_tokens
        stop = threading.Event()  # SIGTERM: finish the current step, checkpoint, exit
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
        while (not stop.is_set() and self.state["trained_tokens"] < self.cfg.max_train_tokens
               and (time.time() - t_start) / 60 < self.cfg.max_minutes):
            if self.state["trained_tokens"] >= self.cfg.train_per_gen * self.corpus.answer_tokens:
                self.generate_more()
                continue
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr((time.time() - t_start) / 60 / self.cfg.max_minutes)
            batch = self.rng.sample(self.corpus.records, min(self.cfg.batch_seqs, len(self.corpus.records)))
            loss = train_step(self.draft, self.optimizer, batch, head_index, self.device)
            n = sum(len(r["answer_ids"]) for r in batch)
            self.state["step"] += 1
            self.state["trained_tokens"] += n
            self.state["losses"].append((self.state["step"], self.state["trained_tokens"], round(loss, 5)))
            if self.state["step"] % 10 == 0:
                log.info("step %d tokens %d loss %.4f", self.state["step"], self.state["trained_tokens"], loss)
            if self.state["trained_tokens"] >= next_eval:
                self.evaluate(heldout)
                next_eval += self.cfg.eval_every_tokens
            if time.time() - last_ckpt > self.cfg.ckpt_minutes * 60:
                self.checkpoint()
                last_ckpt = time.time()
        self.checkpoint()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not stop.is_set():
            self.evaluate(heldout)
        return self.draft
