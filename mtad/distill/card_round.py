"""The model card of a head made by a distillation round on one accelerator (`gpu_round`): how it
was made, read from the round's report (`round.json`: the corpus, the arms and their held-out
curves), around the sections every card has (`card.card_lines`)."""

from __future__ import annotations

from pathlib import Path

from ..markdown import md_table
from ..tasks.heldout.kinds import TRAINED_KINDS
from .card import ACCEPT, CARDS, card_lines
from .head_reports import POSITIONS, at_positions


def round_made_lines(report: dict, arm: str, meta: dict, command: str) -> list[str]:
    """How the round made the head of `arm`: its requests, answers, corpus, start and training, and the
    arm's held-out curve."""
    corpus, chosen = report["corpus"], report["arms"][arm]
    before = (meta.get("continued_from") or {}).get("trained_tokens")
    start = (
        f"- Started from the committed head ({before} trained answer tokens; its own training is in the git "
        "history of this card), read through the round's vocabulary."
        if before is not None
        else "- Started from random initialisation."
    )
    kinds = corpus.get("kinds", {})
    lr, others = report.get("lr") or {}, len(report["arms"]) - 1
    anneal = f" annealed on a cosine to {lr['floor']:g} x it" if lr.get("floor", 1) != 1 else ""
    scratch = f"{others} design{'s' if others != 1 else ''}"
    return [
        f"- Command: `{command}` on {report['device']} (one process: sampling, scoring and training on the "
        "device, every record held in its memory).",
        f"- Requests: {corpus['requests']} new distinct requests of the {len(TRAINED_KINDS)} trained kinds, drawn "
        f"from text installed on the machine (`mtad/tasks/heldout/kinds.py`; {_sources(corpus.get('text_sources'))}) "
        "through the chat template, none over a held-out subject, none of a kind never trained on, none already "
        "among the teacher answers beside it.",
        f"- Answers: {corpus['new_answers']} sampled by the target in bfloat16 before the round's sampling deadline "
        f"({corpus['new_answer_tokens']} answer tokens; temperature 1, the paper's setting and 0.7 in turn, up to "
        f"192 tokens), beside {corpus.get('dataset_answers', '—')} earlier teacher answers (the committed "
        "snapshot and the answers of earlier rounds): "
        f"{corpus['answers']} answers, {corpus['answer_tokens']} answer tokens, {corpus['distinct_prompts']} "
        "distinct prompts, scored teacher-forced on the device.",
        "",
        *md_table(
            ["kind of request", "answers", "answer tokens"],
            ([k, v["answers"], v["answer_tokens"]] for k, v in sorted(kinds.items())),
        ),
        "",
        start,
        f"- Trained in the round: {report['tokens']} answer tokens (epochs over the corpus), "
        f"{report['batch_seqs']} sequences per step balanced over kinds, {report['unroll']} unrolled steps "
        f"(training-time test), KL(p' || q) + 0.1 x SmoothL1(feature), AdamW lr 0.001{anneal}, bfloat16 autocast; "
        f"side by side on identical records with {scratch} from scratch "
        "(`results/draft/head_design.md`).",
        "",
        "## Held-out acceptance during the round",
        "",
        f"{ACCEPT}, scored on the device; mean over every kind at the s-th drafted token.",
        "",
        *md_table(
            ["answer tokens in the round", *POSITIONS],
            ([p["tokens"], *at_positions(p)] for p in chosen.get("curve", [])),
        ),
        "",
    ]


def _sources(text_sources: dict | None) -> str:
    """The installed text sources the requests were drawn from (`installed_text.fingerprint`)."""
    if not text_sources:
        return "the round recorded no fingerprint of those sources"
    return (
        f"sources sha256 {text_sources['sha256'][:16]}: {text_sources['documents']} documents, "
        f"{text_sources['catalogue_sentences']} catalogue sentences"
    )


def write_round_card(
    report: dict, arm: str, draft_file: Path, card: Path, command: str, results: Path | None = None
) -> Path:
    """The card of the head a round trained as `arm`, exported to `draft_file`, written to `card`; `results`:
    the draft kind's folder whose measurement it quotes (None: not measured)."""
    meta = CARDS["head"].read_meta(draft_file)
    made = round_made_lines(report, arm, meta, command)
    card.write_text("\n".join(card_lines("head", draft_file, meta, made, results)) + "\n")
    return card
