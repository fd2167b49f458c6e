"""Every figure a shipped draft's model card quotes is rendered from committed records.

The head's card is the whole rendering of the round's report kept in `results/draft/draft.json` (head_design),
the committed measurement and its file; the layer draft's card, whose training ran before those
reports were kept whole, carries each block that its committed records render (objective A/B,
throughput, held-out curve, architecture) and says that no committed measurement covers it. A stale
or retyped figure fails here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from mtad.distill.card import CARDS, _curve_lines, card_lines, training_ab
from mtad.distill.card_measured import NOT_MEASURED
from mtad.distill.card_round import write_round_card
from mtad.distill.card_training import CardInputs, _ab_lines, _rates_lines
from mtad.distill.draft_measurement import read_measurement
from mtad.result_files import DRAFT, read_section

ROOT = Path(__file__).resolve().parents[1]
DRAFTS = ROOT / "mtad" / "assets" / "drafts"
RECORDS = ROOT / "results" / "draft"


def test_the_head_card_is_the_rendering_of_its_round_its_measurement_and_its_file(tmp_path):
    card = DRAFTS / "smollm2_135m_head.md"
    text = card.read_text()
    command = re.search(r"- Command: `([^`]*)` on", text).group(1)  # how the round was started: words, no figure
    report = read_section(DRAFT, RECORDS, "head_design")["gpu_rounds"][-1]
    rendered = []
    for arm in report["arms"]:  # the arm the round exported as this file
        out = tmp_path / f"{len(rendered)}.md"
        write_round_card(report, arm, card.with_suffix(".safetensors"), out, command, RECORDS)
        rendered.append(out.read_text())
    assert text in rendered, "the head's card is stale: render it from results/draft (card_round.write_round_card)"


def test_the_layer_cards_blocks_are_rendered_from_its_committed_records(tmp_path):
    card = DRAFTS / "smollm2_135m_draft.md"
    text = card.read_text()
    for name in ("rates.jsonl", "curve.jsonl"):  # the training run's records, as published
        shutil.copy(RECORDS / f"training_{name}", tmp_path / name)
    ab = training_ab(RECORDS, "layers")
    (tmp_path / "ab.json").write_text(json.dumps(ab))
    winner = ab["winner"]
    meta = CARDS["layers"].read_meta(card.with_suffix(".safetensors"))
    inputs = CardInputs(tmp_path, "", {"winner": winner}, meta, None)
    blocks = {
        "objective A/B": _ab_lines(tmp_path),
        "throughput": _rates_lines(tmp_path, RECORDS),
        "held-out curve": _curve_lines(CARDS["layers"].curve, inputs),
        "architecture": card_lines("layers", card.with_suffix(".safetensors"), meta, [], None)[:9],
        "measured": NOT_MEASURED,  # the measurement measures the embedded pair's head, not this file
    }
    for name, lines in blocks.items():
        assert len(lines) > 2 and "\n".join(lines).strip() in text, f"{name} is not what its records render"
    measured = read_measurement(RECORDS)["drafts"]
    assert all(r["kind"] != "layers" for r in measured.values())
