"""The distillation corpus: sequences with the target's top-K log-probs at every answer position.

Three ways to fill it, all ending in one batched, teacher-forced target forward per chunk
(scoring a sequence costs far less per token than sampling it):
- ``real``: an item's real answer (code, SQL) is scored as it is;
- ``target``: the target samples the answer (the text the suite actually decodes);
- ``draft``: the draft samples the answer and the target scores it (on-policy data: the
  draft is trained where its own samples go wrong).
Sampling runs our own batched loop over a KV cache and keeps nothing but token ids; the
top-K log-probs come from the scoring forward, so nothing of shape [batch, steps, vocab]
is ever kept.

A chunk is one file `corpus/chunk_<producer>_<n>.pt` written atomically; the trainer picks
up new chunks while it runs (`Corpus.refresh`).
"""

from __future__ import annotations

import inspect
import random
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from ..decoding.logits import logits_to_probs, sample
from ..decoding.sampling import SAMPLING_PARAMS
from .sources import Item

# (temperature, top_k, top_p) that samplers rotate over: raw, the paper's setting, cooler.
PAPER_SETTING = tuple(SAMPLING_PARAMS[key] for key in ("temperature", "top_k", "top_p"))
SAMPLING_SETTINGS = [(1.0, 0, 1.0), PAPER_SETTING, (0.7, 0, 1.0)]


def encode(tokenizer, item: Item, max_prompt: int = 512) -> list[int]:
    """The item's user turn through the chat template (what the tasks feed the models)."""
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": item.user}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    return list(ids[-max_prompt:])


def answer_ids(tokenizer, text: str, max_new: int) -> list[int]:
    """A real answer's ids, ended by the end-of-turn token as the model would end it."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[:max_new] if len(ids) >= max_new else ids + [tokenizer.eos_token_id]


def cache_argument(model) -> str:
    """transformers >= 5.2x names the forward's cache argument `cache`; older releases `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def sample_answers(
    model, prompts: list[list[int]], max_new: int, setting: tuple, eos: int, seed: int, logits_of=None
) -> list[list[int]]:
    """Batched sampling from `model` (target or draft) with left padding and one KV cache.

    Returns each answer's ids up to and including EOS. `logits_of(model, out)` maps a forward's
    output to full-vocabulary logits [B, V] at the last position (default `out.logits[:, -1]`).
    """
    temperature, top_k, top_p = setting
    B, P = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, P), eos, dtype=torch.long)
    mask = torch.zeros(B, P, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p) :] = torch.tensor(p)
        mask[b, P - len(p) :] = 1
    gen = torch.Generator().manual_seed(seed)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)  # [B, P]: left padding must not shift positions
    cache_kw = {cache_argument(model): DynamicCache(config=model.config)}  # filled in place by each forward
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **cache_kw
    )
    answers = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_new):
        logits = logits_of(model, out) if logits_of else out.logits[:, -1]  # [B, V]
        nxt = sample(logits_to_probs(logits.float(), temperature, top_k, top_p), gen)  # [B]
        for b in range(B):
            if not done[b]:
                answers[b].append(int(nxt[b]))
        done |= nxt == eos
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], dim=1)
        positions = positions[:, -1:] + 1
        out = model(
            input_ids=nxt[:, None],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **cache_kw,
        )
    return answers


@torch.no_grad()
def score(target, prompts: list[list[int]], answers: list[list[int]], top_k: int, features: bool = False) -> list[dict]:
    """One teacher-forced target forward over right-padded prompt + answer; top-K log-probs at the
    answer positions only (the LM head runs on those rows alone). `features`: also keep the
    target's final hidden state at every position ([P + n, H], fp16), what a feature head reads."""
    seqs = [p + a for p, a in zip(prompts, answers)]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
    hidden = target.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state  # [B, T, H]
    records = []
    for b, (p, a) in enumerate(zip(prompts, answers)):
        rows = hidden[b, len(p) - 1 : len(p) - 1 + len(a)]  # [n, H]: position P-1+j predicts answer token j
        logprobs = torch.log_softmax(target.lm_head(rows).float(), dim=-1)  # [n, V]
        top = logprobs.topk(top_k, dim=-1)
        records.append(
            {
                "prompt_ids": torch.tensor(p, dtype=torch.int32),
                "answer_ids": torch.tensor(a, dtype=torch.int32),
                "top_ids": top.indices.to(torch.int32),
                "top_logprobs": top.values.to(torch.float16),
            }
        )
        if features:
            records[-1]["features"] = hidden[b, : len(p) + len(a)].to(torch.float16).clone()  # [P + n, H]
    return records


@torch.no_grad()
def target_mass(target, records: list[dict]) -> torch.Tensor:
    """[V] expected target probability of each token summed over the records' answer positions
    (what a restricted draft head should cover)."""
    mass = torch.zeros(target.config.vocab_size, dtype=torch.float64)
    for r in records:
        seq = torch.cat([r["prompt_ids"], r["answer_ids"]]).long()[None]
        P, n = len(r["prompt_ids"]), len(r["answer_ids"])
        mass += torch.softmax(target(seq).logits[0, P - 1 : P - 1 + n].float(), -1).sum(0).double()
    return mass


def draft_logits(draft, out) -> torch.Tensor:
    return out.logits[:, -1]


class Corpus:
    """The chunks on disk; `refresh()` loads chunks written since the last call."""

    def __init__(self, workdir: Path, subdir: str = "corpus"):
        self.dir = Path(workdir) / subdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = []
        self.loaded: set[str] = set()
        self.refresh()

    def refresh(self) -> int:
        new = 0
        for path in sorted(self.dir.glob("chunk_*.pt")):
            if path.name in self.loaded:
                continue
            chunk = torch.load(path, weights_only=False)
            for r in chunk["records"]:
                r.pop("mass", None)  # kept by early chunks; not needed for training
            self.records.extend(chunk["records"])
            self.loaded.add(path.name)
            new += 1
        return new

    def write(self, name: str, records: list[dict], meta: dict) -> Path:
        path = self.dir / f"chunk_{name}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"records": records, "meta": meta}, tmp)
        tmp.replace(path)
        return path

    def by_family(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.records:
            out.setdefault(r["family"], []).append(r)
        return out

    @property
    def answer_tokens(self) -> int:
        return sum(len(r["answer_ids"]) for r in self.records)


def make_chunk(
    items: list[Item],
    kind: str,
    target,
    tokenizer,
    draft=None,
    max_new: int = 128,
    top_k: int = 32,
    seed: int = 0,
    setting: tuple | None = None,
    features: bool = False,
) -> tuple[list[dict], dict]:
    """Answer (or take the real answers of) `items`, score them with the target; records + timing."""
    t0 = time.perf_counter()
    eos = tokenizer.eos_token_id
    prompts = [encode(tokenizer, it) for it in items]
    setting = setting or SAMPLING_SETTINGS[seed % len(SAMPLING_SETTINGS)]
    if kind == "real":
        answers = [answer_ids(tokenizer, it.answer, max_new) for it in items]
    elif kind == "target":
        answers = sample_answers(target, prompts, max_new, setting, eos, seed)
    elif kind == "draft":
        answers = sample_answers(draft, prompts, max_new, setting, eos, seed, logits_of=draft_logits)
    else:
        raise ValueError(f"unknown chunk kind {kind!r}; valid: real, target, draft")
    t1 = time.perf_counter()
    records = score(target, prompts, answers, top_k, features)
    for r, it in zip(records, items):
        r.update(family=it.family, kind=kind, setting=setting)
    t2 = time.perf_counter()
    n = sum(len(a) for a in answers)
    return records, {
        "kind": kind,
        "tokens": n,
        "sample_s": t1 - t0,
        "score_s": t2 - t1,
        "setting": setting,
        "families": sorted({it.family for it in items}),
    }


def draw_batch(rng: random.Random, draw, size: int, families: dict[str, float], real: bool) -> list[Item]:
    """`size` items, families drawn by weight (real-text chunks: only families that have real text)."""
    names, weights = zip(*families.items())
    return [draw(rng.choices(names, weights)[0], rng, real=real) for _ in range(size)]
