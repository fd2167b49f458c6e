"""A distillation round on one accelerator, in one process and one time budget.

On a CPU the teacher pass is what takes hours (target sampling and scoring, a core each); on a
GPU it takes minutes, and the whole featurized corpus fits in the device's memory. A round:

1. `draw_requests`, where the text the requests are built from is installed (`requests.py`):
   distinct training requests of every trained kind through the chat template, none over a
   held-out subject or of a kind never trained on, none already among the teacher answers; saved
   with the ids of the held-out answers (`write_bundle`), so that a machine without that text
   (or without this package's dependencies beyond torch and transformers) runs the rest;
2. `sample_answers`: the target samples an answer to each request with transformers' `generate`
   in large batches of similar prompt length, the producer's sampling settings taken in turn
   (`corpus.SAMPLING_SETTINGS`);
3. the committed teacher answers, the new ones and the held-out answers are scored
   teacher-forced (`corpus.score`) with every record kept on the device;
4. heads trained side by side on identical records (`head_ablations.heads_ab`) for the time
   left, each with its held-out curve: the committed head continued and the designs of
   `ROUND_ARMS` from scratch.
`run_round` writes the new answers as a shard of teacher-answer rows (`answers.write_rows`),
every head and a report (`round.json`).
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import random
import time
from dataclasses import replace
from pathlib import Path

import torch

from ..tasks.heldout.kinds import TRAINED_KINDS, draw
from .answers import read_rows, score_rows, summary, write_rows
from .corpus import SAMPLING_SETTINGS, Records, encode

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "mtad-distill-round-v1"
# the designs trained from scratch beside the committed head (`head_ablations.ARM_DEFAULTS`
# fills in the rest: one layer, three depths, its own output layer, no feature loss)
ROUND_ARMS = {
    "one depth, from scratch": dict(fused=False, own_output=False, reg=0.1),
    "fused, high depth final": dict(final=True),
    "fused, high depth final, 2 layers": dict(final=True, layers=2),
}
CONTINUED = "committed head, continued"


def draw_requests(tokenizer, count: int, seed: int, known: set[tuple[int, ...]]) -> list[dict]:
    """`count` distinct training requests (prompt ids through the chat template), the trained kinds
    taken in turn; none whose prompt is in `known`."""
    rng, rows, seen = random.Random(seed), [], set(known)
    for i in range(20 * count):
        if len(rows) >= count:
            break
        kind = TRAINED_KINDS[i % len(TRAINED_KINDS)]
        ids = tuple(encode(tokenizer, draw(kind, rng)))
        if ids not in seen:
            seen.add(ids)
            rows.append({"prompt_ids": list(ids), "kind": kind})
    if len(rows) < count:
        raise RuntimeError(f"only {len(rows)} new distinct requests after {20 * count} draws")
    return rows


def write_bundle(path: Path, requests: list[dict], heldout: dict[str, list[dict]], meta: dict) -> Path:
    """The round's input as token ids only, gzip-compressed: the requests and the held-out answers."""
    held = [
        {"prompt_ids": r["prompt_ids"].tolist(), "answer_ids": r["answer_ids"].tolist(), "kind": kind}
        for kind, records in heldout.items()
        for r in records
    ]
    buffer = io.BytesIO()
    torch.save({"format": BUNDLE_FORMAT, "requests": requests, "heldout": held, "meta": meta}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


def read_bundle(path: Path) -> dict:
    try:
        bundle = torch.load(io.BytesIO(gzip.decompress(Path(path).read_bytes())), weights_only=False)
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a distillation round's requests; make one with round-requests") from exc
    if bundle.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"{path}: not a distillation round's requests ({BUNDLE_FORMAT}); make one with round-requests")
    return bundle


def cut_at(tokens: list[int], eos: int) -> list[int]:
    """An answer up to and including its first end-of-turn token."""
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def sampling_batches(prompts: list[list[int]], batch_rows: int, seed: int) -> list[tuple[list[int], tuple]]:
    """The prompts in batches of similar length (little padding), taken in a seeded random order,
    each with the sampling setting it is answered under (the settings in turn)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = [order[i : i + batch_rows] for i in range(0, len(order), batch_rows)]
    random.Random(seed).shuffle(batches)  # a deadline then cuts no length range out
    return [(b, SAMPLING_SETTINGS[n % len(SAMPLING_SETTINGS)]) for n, b in enumerate(batches)]


@torch.no_grad()
def sample_batch(target, prompts: list[list[int]], setting: tuple, eos: int, max_new: int) -> list[list[int]]:
    """Each prompt's sampled answer (up to and including EOS) under (temperature, top-k, top-p)
    (0 = off), the prompts left-padded into one `generate` call."""
    from transformers import GenerationConfig

    temperature, top_k, top_p = setting
    config = GenerationConfig(
        do_sample=True,
        max_new_tokens=max_new,
        temperature=temperature,
        top_k=top_k,  # 0: no top-k warper
        top_p=top_p,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    device = next(target.parameters()).device
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), eos, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, T - len(prompt) :] = torch.tensor(prompt)
        mask[row, T - len(prompt) :] = 1
    out = target.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
    return [cut_at(row[T:].tolist(), eos) for row in out]


def sample_answers(
    target, requests: list[dict], eos: int, max_new: int, batch_rows: int, seed: int, deadline: float
) -> list[tuple[dict, list[int], tuple]]:
    """(request, answer, setting) for the requests answered before `deadline` (perf_counter)."""
    prompts = [r["prompt_ids"] for r in requests]
    done = []
    for n, (batch, setting) in enumerate(sampling_batches(prompts, batch_rows, seed)):
        if time.perf_counter() > deadline:
            log.info("sampling stopped at its deadline: %d of %d requests answered", len(done), len(requests))
            break
        torch.manual_seed(seed * 1_000_003 + n)
        answers = sample_batch(target, [prompts[i] for i in batch], setting, eos, max_new)
        done += [(requests[i], a, setting) for i, a in zip(batch, answers)]
        log.info("batch %d: %d answers, %d tokens so far", n, len(done), sum(len(a) for _, a, _ in done))
    return done


def answer_rows(answered: list[tuple[dict, list[int], tuple]], target: str) -> list[dict]:
    """The new answers as teacher-answer rows (`answers.COLUMNS`)."""
    return [
        {
            "prompt_ids": q["prompt_ids"],
            "answer_ids": a,
            "kind": q["kind"],
            "temperature": float(s[0]),
            "top_k": int(s[1]),
            "top_p": float(s[2]),
            "chunk": f"round_{SAMPLING_SETTINGS.index(s)}",
            "target": target,
            "target_dtype": "bfloat16",
        }
        for q, a, s in answered
    ]


def scratch_arms(names: str) -> dict:
    """The designs of `ROUND_ARMS` named in `names` (";"-separated, as the names hold commas; "all"
    every one, "" none)."""
    if names.strip() == "all":
        return dict(ROUND_ARMS)
    picked = [n.strip() for n in names.split(";") if n.strip()]
    unknown = [n for n in picked if n not in ROUND_ARMS]
    if unknown:
        raise ValueError(f"round arms {unknown}: valid are {'; '.join(ROUND_ARMS)} (or all, or none as '')")
    return {n: ROUND_ARMS[n] for n in picked}


def round_arms(target, committed: Path | None, ids: list[int], cfg, scratch: dict = ROUND_ARMS) -> dict:
    """The committed head read through the round's vocabulary (continued), then the designs of
    `scratch` (name -> `head_ablations.ARM_DEFAULTS` overrides) from scratch."""
    from ..models.head import load_head
    from .head_ablations import AblationArm, build_arms
    from .head_training import compute_dtype, with_vocabulary

    device = next(target.parameters()).device
    dtype = compute_dtype(cfg.compute_dtype, device)
    arms = {}
    if committed is not None and committed.exists():
        head = with_vocabulary(load_head(committed, target, torch.float32), target, ids)
        arms[CONTINUED] = AblationArm(head.float().to(device), dtype, cfg.reg_weight)  # its own design's weight
    return arms | build_arms(cfg, target, ids, scratch)


def run_round(
    target,
    tokenizer,
    bundle: dict,
    dataset: Path,
    committed: Path | None,
    out: Path,
    target_name: str,
    minutes: float,
    *,
    batch_seqs: int,
    curve_every: int,
    special_ids: list[int],
    seed: int,
    scratch: dict,
    lr_floor: float,
    batch_rows: int = 1024,
    max_new: int = 192,
    score_tokens: int = 65536,
    sample_share: float = 0.35,
    train_tokens: int = 10**12,
) -> dict:
    """Steps 2-4 of a round on `target`'s device within `minutes` (sampling stops after
    `sample_share` of them, training after `train_tokens` answer tokens per arm or the time left,
    its learning rate annealed to `lr_floor` x the trainer's by then); `scratch`: the designs
    trained from scratch beside the committed head (`ROUND_ARMS` or a part of it); writes into `out`.
    The settings the round's command line sets (scripts/distill_draft.py) have their one default there."""
    from .head_ablations import heads_ab
    from .head_training import HeadTrainConfig, corpus_mass
    from .training import choose_head_tokens

    started = time.perf_counter()
    device = next(target.parameters()).device
    out.mkdir(parents=True, exist_ok=True)
    deadline = started + 60 * minutes * sample_share
    new_rows = round_answers(target, tokenizer, bundle, target_name, max_new, batch_rows, seed, deadline, out)
    timings = {"sample_s": time.perf_counter() - started}
    log.info("sampled %d answers, %d tokens in %.0f s", len(new_rows), _tokens(new_rows), timings["sample_s"])
    t0 = time.perf_counter()
    old_rows = read_rows(dataset)
    records = score_rows(target, old_rows + new_rows, max_tokens=score_tokens, store=device)
    heldout_records = score_rows(target, bundle["heldout"], max_tokens=score_tokens, store=device)
    heldout, corpus = Records(heldout_records).by_family(), Records(records)
    timings["score_s"] = time.perf_counter() - t0
    log.info("scored %d records (%d answer tokens) in %.0f s", len(records), corpus.answer_tokens, timings["score_s"])

    cfg = replace(HeadTrainConfig(workdir=str(out), seed=seed), batch_seqs=batch_seqs, lr_floor=lr_floor)
    mass = corpus_mass(records, target.config.vocab_size, processed=True)
    ids = choose_head_tokens(mass, cfg.head_size, list(special_ids))
    arms = round_arms(target, committed, ids, cfg, scratch)
    left = minutes - (time.perf_counter() - started) / 60 - 1.0  # a minute for the last evaluation and files
    t0 = time.perf_counter()
    result = heads_ab(cfg, corpus, heldout, arms, train_tokens, max_minutes=left, curve_every=curve_every)
    timings["train_s"] = time.perf_counter() - t0
    save_round_heads(arms, result, out, committed, batch_seqs, device_name(device))
    made = corpus_record(corpus, old_rows, new_rows, bundle, len(heldout_records))
    report = result | round_record(target, cfg, made, float(mass[ids].sum() / mass.sum()), timings)
    (out / "round.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def round_record(target, cfg, corpus: dict, coverage: float, timings: dict) -> dict:
    """A round's report beside its arms: what it trained on (`corpus_record`), the share of the
    corpus's mass its vocabulary covers, its training settings, timings, machine and device."""
    from ..provenance import environment_record

    return {
        "corpus": corpus,
        "vocabulary_mass_coverage": coverage,
        "batch_seqs": cfg.batch_seqs,
        "lr": {"start": cfg.lr, "floor": cfg.lr_floor, "anneal": "cosine over the training time"},
        "timings": timings,
        "environment": environment_record([target]),
        "device": device_name(next(target.parameters()).device),
    }


def round_answers(
    target, tokenizer, bundle: dict, target_name: str, max_new: int, batch_rows: int, seed: int, deadline: float, out
) -> list[dict]:
    """Step 2: the bundle's requests answered by `target` before `deadline` (`sample_answers`), as
    teacher-answer rows written to `out/answers-round.parquet`."""
    answered = sample_answers(target, bundle["requests"], tokenizer.eos_token_id, max_new, batch_rows, seed, deadline)
    new_rows = answer_rows(answered, target_name)
    write_rows(new_rows, out / "answers-round.parquet")
    return new_rows


def save_round_heads(arms: dict, result: dict, out: Path, committed: Path | None, batch_seqs: int, device: str) -> None:
    """Each arm's head into `out` as `head_<i>.safetensors` (`head_meta`), its file named in `result`."""
    from ..models.head import save_head

    for i, (name, arm) in enumerate(arms.items()):
        meta = head_meta(name, result["tokens"], committed, batch_seqs, device)
        save_head(arm.head, out / f"head_{i}.safetensors", extra_meta=meta)
        result["arms"][name]["file"] = f"head_{i}.safetensors"


def corpus_record(corpus: Records, old_rows: list[dict], new_rows: list[dict], bundle: dict, heldout: int) -> dict:
    """What a round trained on: the scored corpus, its distinct prompts and answer tokens, the new
    answers beside the dataset's, the requests and held-out answers, the kinds, and the fingerprint of
    the text the requests were drawn from."""
    rows = summary(old_rows + new_rows)
    return {
        "answers": len(corpus.records),
        "answer_tokens": corpus.answer_tokens,
        "distinct_prompts": rows["distinct_prompts"],
        "distinct_answer_tokens": _tokens(_distinct(old_rows + new_rows)),
        "new_answers": len(new_rows),
        "new_answer_tokens": _tokens(new_rows),
        "requests": len(bundle["requests"]),
        "heldout_answers": heldout,
        "dataset_answers": len(old_rows),
        "kinds": rows["kinds"],
        "text_sources": bundle.get("meta", {}).get("text_sources"),  # what the requests were drawn from
    }


def _tokens(rows: list[dict]) -> int:
    """Answer tokens of teacher-answer rows."""
    return sum(len(r["answer_ids"]) for r in rows)


def head_meta(arm: str, tokens: int, committed: Path | None, batch_seqs: int, device) -> dict:
    """A round head's file metadata: its trained tokens counted from its start (the committed head's
    own, for the arm that continues it) and what the round did."""
    from ..models.head import read_head_meta

    done = {"trained_tokens": tokens, "arm": arm, "batch_seqs": batch_seqs, "device": str(device)}
    if arm != CONTINUED:
        return {"trained_tokens": tokens, "round": done}
    before = read_head_meta(committed)
    kept = {"trained_tokens": before.get("trained_tokens"), "train_config": before.get("train_config")}
    return {"trained_tokens": (before.get("trained_tokens") or 0) + tokens, "continued_from": kept, "round": done}


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _distinct(rows: list[dict]) -> list[dict]:
    from .answers import row_key

    return list({row_key(r["prompt_ids"], r["answer_ids"]): r for r in rows}.values())


__all__ = [
    "BUNDLE_FORMAT",
    "ROUND_ARMS",
    "CONTINUED",
    "draw_requests",
    "head_meta",
    "read_bundle",
    "run_round",
    "scratch_arms",
    "sample_answers",
    "sampling_batches",
    "write_bundle",
]
