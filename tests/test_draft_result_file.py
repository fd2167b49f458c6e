"""The draft kind's result file (`results/draft/draft.json`): each step of the distillation package writes
its own section beside the others through its own writer, the Markdown beside it is rendered from the
section as stored, and what other packages show of it (the results page, the cards) comes from the
package's functions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtad.distill.card import training_ab, write_training_ab
from mtad.distill.draft_measurement import read_measurement, readme_summary, write_measurement
from mtad.distill.head_reports import readme_lines, write_calibration, write_design
from mtad.result_files import DRAFT, read_file, read_section

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "draft"
sys.path.insert(0, str(ROOT / "scripts"))


def test_each_step_writes_its_section_beside_the_others_and_the_markdown_from_it(tmp_path):
    design = read_section(DRAFT, COMMITTED, "head_design")
    for key, value in design.items():  # one design step after another, as the script runs them
        text = write_design(tmp_path, key, value)
    assert text == (COMMITTED / "head_design.md").read_text()
    calibration = write_calibration(tmp_path, read_section(DRAFT, COMMITTED, "calibration"))
    assert calibration == (COMMITTED / "calibration.md").read_text()
    write_training_ab(tmp_path, "layers", training_ab(COMMITTED, "layers"))
    write_measurement(tmp_path, read_measurement(COMMITTED))
    sections = read_file(DRAFT, tmp_path)
    assert list(sections) == ["measurement", "calibration", "head_design", "training_ab"]  # none lost, in order
    assert sections == {name: read_section(DRAFT, COMMITTED, name) for name in sections}
    assert readme_lines(tmp_path) == readme_lines(COMMITTED)
    assert readme_summary(tmp_path) == readme_summary(COMMITTED) is not None


def test_each_draft_kind_publishes_its_training_ab_beside_the_others(tmp_path):
    assert training_ab(tmp_path, "head") is None
    write_training_ab(tmp_path, "layers", {"winner": "kl_paper"})
    write_training_ab(tmp_path, "head", {"winner": "fused"})
    write_training_ab(tmp_path, "layers", {"winner": "kl_raw"})  # published again: in its own place
    assert read_section(DRAFT, tmp_path, "training_ab") == {"layers": {"winner": "kl_raw"}, "head": {"winner": "fused"}}
    with pytest.raises(ValueError, match="unknown draft kind 'medusa'; valid: layers, head"):
        write_training_ab(tmp_path, "medusa", {})


def test_the_results_page_says_the_measurement_is_missing_and_keeps_the_head_reports(tmp_path):
    from results_readme import page

    folder = tmp_path / "results" / "draft"
    write_design(folder, "design_ablation", read_section(DRAFT, COMMITTED, "head_design")["design_ablation"])
    text = page(tmp_path / "results").split("## The draft\n")[1].split("\n## ")[0]
    assert f"Not committed: `{folder / 'draft.json'}` (`make measure-draft` writes it)." in text
    assert "Each lever of the fused head design from scratch on identical records" in text
    assert "confidence against the target's acceptance" not in text  # no calibration there: nothing said


def test_rendering_a_folder_without_a_measurement_says_so(tmp_path):
    from mtad.experiments.drafts import main

    assert main(["--render", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()  # nothing written
