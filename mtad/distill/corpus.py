"""The distillation corpus: sequences with the target's top-K log-probs at every answer position.

Three ways to fill it, all ending in the target's teacher pass of the answer:
- ``real``: an item's real answer (code, SQL) is scored as it is, teacher-forced forwards
  batched by length;
- ``target``: the target samples the answer (the text the suite actually decodes); the
  sampling forwards are its teacher pass (`sampler.sample_stream(keep_top_k=...)`), so nothing
  is scored twice;
- ``draft``: the draft samples the answer and the target scores it (on-policy data: the
  draft is trained where its own samples go wrong).
Sampling keeps a fixed number of rows decoding, each refilled as its answer ends
(`sampler.sample_stream`), and keeps nothing but token ids; the
top-K log-probs come from the scoring forward, so nothing of shape [batch, steps, vocab]
is ever kept.

A chunk is one file `corpus/chunk_<producer>_<n>.pt` written atomically; the trainer picks
up new chunks while it runs (`Corpus.refresh`).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from ..decoding.sampling import SAMPLING_PARAMS
from ..tasks.heldout.sources import Item
from .sampler import sample_stream

# (temperature, top_k, top_p) that samplers rotate over: raw, the paper's setting, cooler.
PAPER_SETTING = tuple(SAMPLING_PARAMS[key] for key in ("temperature", "top_k", "top_p"))
SAMPLING_SETTINGS = [(1.0, 0, 1.0), PAPER_SETTING, (0.7, 0, 1.0)]


def encode(tokenizer, item: Item, max_prompt: int = 512) -> list[int]:
    """The item's turns (earlier ones first, for a multi-turn request) through the chat template,
    as the tasks feed the models; the last `max_prompt` ids."""
    history = [{"role": role, "content": text} for role, text in getattr(item, "history", ())]
    ids = tokenizer.apply_chat_template(
        history + [{"role": "user", "content": item.user}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    return list(ids[-max_prompt:])


def answer_ids(tokenizer, text: str, max_new: int) -> list[int]:
    """A real answer's ids, ended by the end-of-turn token as the model would end it."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[:max_new] if len(ids) >= max_new else ids + [tokenizer.eos_token_id]


def sample_answers(
    model, prompts: list[list[int]], max_new: int, setting: tuple, eos: int, seed: int, logits_of=None, slots: int = 32
) -> list[list[int]]:
    """Each prompt's sampled answer (ids up to and including EOS), `slots` rows decoding at once and
    refilled as answers end (`sampler.sample_stream`). `logits_of(model, out)` maps a forward's
    output to full-vocabulary logits [B, V] at the last position (default `out.logits[:, -1]`)."""
    return sample_stream(model, prompts, max_new, setting, eos, seed, slots=slots, logits_of=logits_of)


def length_buckets(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, each padded batch at most `max_tokens`
    positions (B x longest): sorting by length first means almost nothing is padding."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    return batches + ([current] if current else [])


@torch.no_grad()
def score(
    target,
    prompts: list[list[int]],
    answers: list[list[int]],
    top_k: int,
    features: bool = False,
    max_tokens: int = 4096,
    store: str | torch.device = "cpu",
) -> list[dict]:
    """Teacher-forced target forwards over prompt + answer, batched by length (`length_buckets`);
    top-K log-probs at the answer positions only (the LM head runs on those rows alone).
    `features`: also keep the target's final hidden state at every position ([P + n, H], fp16),
    what a one-depth feature head reads, and its hidden states at the three depths a fused head
    reads (`head.fused_depths`: [P + n, 3H], fp16, low to high). Records come back in the order
    of `prompts`, their tensors on `store` (an accelerator may hold a whole corpus)."""
    from ..models.head import fused_depths

    depths = fused_depths(target.config.num_hidden_layers)
    seqs = [p + a for p, a in zip(prompts, answers)]
    records: list[dict | None] = [None] * len(seqs)
    device = next(target.parameters()).device
    for batch in length_buckets([len(s) for s in seqs], max_tokens):
        T = max(len(seqs[i]) for i in batch)
        ids = torch.zeros(len(batch), T, dtype=torch.long)
        mask = torch.zeros(len(batch), T, dtype=torch.long)
        for b, i in enumerate(batch):
            ids[b, : len(seqs[i])] = torch.tensor(seqs[i])
            mask[b, : len(seqs[i])] = 1
        out = target.model(
            input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False, output_hidden_states=features
        )
        hidden = out.last_hidden_state  # [B, T, H]
        fused = torch.cat([out.hidden_states[d] for d in depths], dim=-1) if features else None  # [B, T, 3H]
        P = [len(prompts[i]) for i in batch]
        n = [len(answers[i]) for i in batch]
        # the LM head and top-K on the kept rows only: position P-1+j predicts answer token j
        rows = torch.cat([hidden[b, p - 1 : p - 1 + k] for b, (p, k) in enumerate(zip(P, n))])  # [N, H]
        top = torch.log_softmax(target.lm_head(rows).float(), dim=-1).topk(top_k, dim=-1)  # [N, K]
        top_ids, top_lp = top.indices.to(store, torch.int32), top.values.to(store, torch.float16)
        offsets = [0] + torch.tensor(n).cumsum(0).tolist()
        for b, i in enumerate(batch):
            records[i] = {
                "prompt_ids": torch.tensor(prompts[i], dtype=torch.int32, device=store),
                "answer_ids": torch.tensor(answers[i], dtype=torch.int32, device=store),
                "top_ids": top_ids[offsets[b] : offsets[b + 1]],
                "top_logprobs": top_lp[offsets[b] : offsets[b + 1]],
            }
            if features:  # one conversion, no further copy (a view would save the whole batch's storage)
                records[i]["features"] = hidden[b, : len(seqs[i])].to(store, torch.float16, copy=True)  # [P + n, H]
                records[i]["depth_features"] = fused[b, : len(seqs[i])].to(store, torch.float16, copy=True)
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


def write_chunk(corpus_dir: Path, name: str, records: list[dict], meta: dict) -> Path:
    """One chunk file `chunk_<name>.pt`, written atomically (a trainer may be reading the folder)."""
    path = Path(corpus_dir) / f"chunk_{name}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"records": records, "meta": meta}, tmp)
    tmp.replace(path)
    return path


class Records:
    """Corpus records in memory, by kind of request (what the trainers read of a corpus)."""

    def __init__(self, records: list[dict] | None = None):
        self.records: list[dict] = records if records is not None else []

    def by_family(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.records:
            out.setdefault(r["family"], []).append(r)
        return out

    @property
    def answer_tokens(self) -> int:
        return sum(len(r["answer_ids"]) for r in self.records)


class Corpus(Records):
    """The chunks on disk; `refresh()` loads chunks written since the last call."""

    def __init__(self, workdir: Path, subdir: str = "corpus", load: bool = True):
        super().__init__()
        self.dir = Path(workdir) / subdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.loaded: set[str] = set()
        if load:  # a producer only writes
            self.refresh()

    def refresh(self) -> int:
        new = 0
        for path in sorted(self.dir.glob("chunk_*.pt")):
            if path.name in self.loaded:
                continue
            # memory-mapped: a corpus outgrows memory (a head's stored features are ~10 kB per
            # position), and the page cache keeps what the batches touch
            chunk = torch.load(path, weights_only=False, mmap=True)
            for r in chunk["records"]:
                r.pop("mass", None)  # kept by early chunks; not needed for training
                r["chunk"] = path.stem.removeprefix("chunk_")  # where it came from (the dataset's rows name it)
            self.records.extend(chunk["records"])
            self.loaded.add(path.name)
            new += 1
        return new

    def write(self, name: str, records: list[dict], meta: dict) -> Path:
        return write_chunk(self.dir, name, records, meta)


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
    slots: int = 32,
) -> tuple[list[dict], dict]:
    """Answer (or take the real answers of) `items`, score them with the target; records + timing."""
    t0 = time.perf_counter()
    eos = tokenizer.eos_token_id
    prompts = [encode(tokenizer, it) for it in items]
    setting = setting or SAMPLING_SETTINGS[seed % len(SAMPLING_SETTINGS)]
    if kind == "real":
        answers = [answer_ids(tokenizer, it.answer, max_new) for it in items]
    elif kind == "target":  # the sampling forwards keep the teacher pass: no second forward
        answers, passes = target_answers(target, prompts, max_new, setting, eos, seed, slots, top_k, features)
    elif kind == "draft":
        answers = sample_answers(draft, prompts, max_new, setting, eos, seed, logits_of=draft_logits, slots=slots)
    else:
        raise ValueError(f"unknown chunk kind {kind!r}; valid: real, target, draft")
    t1 = time.perf_counter()
    if kind == "target":
        records = sampled_records(prompts, answers, passes)
    else:
        records = score(target, prompts, answers, top_k, features)
    for r, it in zip(records, items):
        r.update(family=it.family, kind=kind, setting=setting)
    t2 = time.perf_counter()
    return records, chunk_meta(kind, items, prompts, answers, setting, t1 - t0, t2 - t1)


def target_answers(
    target,
    prompts: list[list[int]],
    max_new: int,
    setting: tuple,
    eos: int,
    seed: int,
    slots: int,
    top_k: int,
    features: bool,
) -> tuple[list[list[int]], list[dict]]:
    """The target's sampled answers to `prompts` and the teacher pass its sampling forwards kept
    (`sampler.sample_stream`): the top-`top_k` log-probs and, with `features`, the final and the
    fused depths' hidden states."""
    from ..models.head import fused_depths

    depths = fused_depths(target.config.num_hidden_layers) if features else ()
    return sample_stream(
        target,
        prompts,
        max_new,
        setting,
        eos,
        seed,
        slots=slots,
        keep_top_k=top_k,
        keep_features=features,
        depths=depths,
    )


def sampled_records(prompts: list[list[int]], answers: list[list[int]], passes: list[dict]) -> list[dict]:
    """Records of sampled answers from the teacher pass their sampling kept (no scoring forward)."""
    return [
        {
            "prompt_ids": torch.tensor(p, dtype=torch.int32),
            "answer_ids": torch.tensor(a, dtype=torch.int32),
        }
        | tp
        for p, a, tp in zip(prompts, answers, passes)
    ]


def chunk_meta(
    kind: str,
    items: list[Item],
    prompts: list[list[int]],
    answers: list[list[int]],
    setting: tuple,
    sample_s: float,
    score_s: float,
) -> dict:
    """A chunk's record beside its records: kind, answer tokens, positions scored, seconds sampling
    and scoring, the sampling setting and the families drawn."""
    return {
        "kind": kind,
        "tokens": sum(len(a) for a in answers),
        "positions": sum(len(p) + len(a) for p, a in zip(prompts, answers)),
        "sample_s": sample_s,
        "score_s": score_s,
        "setting": setting,
        "families": sorted({it.family for it in items}),
    }


def draw_batch(rng: random.Random, draw, size: int, families: dict[str, float], real: bool) -> list[Item]:
    """`size` items, families drawn by weight (real-text chunks: only families that have real text)."""
    names, weights = zip(*families.items())
    return [draw(rng.choices(names, weights)[0], rng, real=real) for _ in range(size)]
