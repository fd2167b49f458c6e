"""The claims experiment's comparisons: block verification against SpS, whose chain it verifies, and
MTAD against block verification, on the same prompts as every other row and without a verdict. Where
block verification's cells are present the rows are measured; where its module is absent (the method
unregistered) the config and the report still work, and the rows say "not run", naming the method.
Cells: the committed claims cells copied into a fresh root (``claims_cells``), block verification's
made from other methods' cells so that every figure of its rows is known in advance."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from claims_cells import copy_cells

from mtad.decoding import registry as methods

REPO = Path(__file__).resolve().parents[1]
PAIR = "smollm2_135m_head"
CELLS = REPO / "results" / "runs" / "claims" / PAIR
CONFIG = REPO / "conf" / "experiment" / "claims.yaml"
JOINT = "blockverify"


def _settings(**changes):
    from mtad.experiments.claims import claims_config

    _, settings, _ = claims_config(["experiment=claims"])
    return replace(settings.report, resamples=199, **changes)


def _as_stored(report: dict) -> dict:
    return json.loads(json.dumps(report, ensure_ascii=False, default=str))


def _row(report: dict, comparison: str, task: str) -> dict:
    return next(r for r in report["claims"] if r["comparison"] == comparison and r["task"] == task)


def _scaled_seconds(cell: Path, factor: float) -> None:
    """Every generation of the cell in `factor` of its time: the same tokens, a known speed ratio."""
    records = [json.loads(line) for line in (cell / "samples.jsonl").read_text().splitlines()]
    for record in records:
        for turn in (t for s in record["samples"] for t in s["turns"]):
            turn["stats"]["seconds"] *= factor
    (cell / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def default_cells(tmp_path_factory) -> Path:
    """The committed default cells of both prompt sets (no variant cells) in a fresh root, less
    block verification's: the fixtures below make its cells, or test a root without them."""
    if not CELLS.is_dir():
        pytest.skip(f"no committed claims cells under {CELLS}")
    root = tmp_path_factory.mktemp("comparisons")
    for task in ("chat", "cnndm"):
        copy_cells(CELLS / task, root / "claims" / PAIR / task)
        shutil.rmtree(root / "claims" / PAIR / task / JOINT, ignore_errors=True)
    return root


@pytest.fixture(scope="module")
def with_joint_cells(default_cells, tmp_path_factory):
    """Block verification's cells beside them: on chat SpS's cell in 0.8 of its time (the same
    tokens per block, 1.25x the speed), on cnndm sampling's cell (so that MTAD against it is C1's
    and C2's MTAD against sampling)."""
    from mtad.report.claims_report import build_report

    if JOINT not in methods.specs():
        pytest.skip(f"{JOINT} is not registered in this checkout")
    root = tmp_path_factory.mktemp("joint") / "root"
    copy_cells(default_cells, root)
    cells = root / "claims" / PAIR
    copy_cells(cells / "chat" / "sps", cells / "chat" / JOINT)
    _scaled_seconds(cells / "chat" / JOINT, 0.8)
    copy_cells(cells / "cnndm" / "sampling", cells / "cnndm" / JOINT)
    settings = _settings(variants=[])
    return _as_stored(build_report(root, "claims", PAIR, settings, theory=False)), root


def test_the_comparisons_are_measured_on_the_same_prompts_without_a_verdict(with_joint_cells):
    from mtad.stats.intervals import NO_VERDICT

    report, root = with_joint_cells
    label = methods.label(JOINT)
    same_drafts = _row(report, f"{label} / SpS: tokens/s ratio", "chat")
    assert same_drafts["interval"]["estimate"] == pytest.approx(1.25)
    assert same_drafts["beside"]["block_efficiency_ratio"]["estimate"] == pytest.approx(1.0)
    assert same_drafts["beside"]["timing"].startswith("interleaved")
    assert same_drafts["paper"] == "not stated (block verification of SpS's chain)"
    # MTAD over block verification: MTAD over SpS, divided by the 1.25 the fixture gave
    over_sps = _row(report, "MTAD / SpS: tokens/s ratio", "chat")["interval"]["estimate"]
    speed = _row(report, f"MTAD / {label}: tokens/s ratio", "chat")
    assert speed["interval"]["estimate"] == pytest.approx(over_sps / 1.25)
    assert speed["beside"]["block_efficiency_ratio"]["estimate"] > 0
    ppl = {
        m: json.loads((root / "claims" / PAIR / "chat" / m / "metrics.json").read_text())["perplexity"]
        for m in ("mtad", "sps")
    }
    chat_ppl = _row(report, f"MTAD vs {label}: PPL ratio − 1", "chat")
    assert chat_ppl["interval"]["estimate"] == pytest.approx(ppl["mtad"] / ppl["sps"] - 1, rel=1e-6)
    # on cnndm block verification's cell is sampling's: the rows are C1's and C2's, interval for interval
    for comparison in ("PPL ratio − 1", "rougeL ratio − 1"):
        ours = _row(report, f"MTAD vs {label}: {comparison}", "cnndm")
        paper = _row(report, f"MTAD vs sampling: {comparison}", "cnndm")
        assert ours["interval"] == paper["interval"] and ours["interval"]["n"] == 80
    rows = [r for r in report["claims"] if JOINT in r["methods"]]
    assert len(rows) == 7  # speed on both prompt sets twice, perplexity on both, ROUGE-L on cnndm
    for row in rows:
        assert row["verdict"] == NO_VERDICT and not row["stated"] and row["version"] == ""
    assert report["coverage"]["missing"] == [] and report["coverage"]["unregistered"] == []


def test_the_markdown_shows_the_comparisons_rows(with_joint_cells):
    from mtad.report.claims_markdown import to_markdown

    report, _ = with_joint_cells
    text = to_markdown(report)
    line = next(line for line in text.splitlines() if f"| {methods.label(JOINT)} / SpS: tokens/s ratio | chat" in line)
    assert "| 1.25× [1.25×, 1.25×] |" in line and "**no verdict**" in line and "block efficiency ratio 1.00×" in line
    assert "not registered here" not in text


def test_absent_joint_cells_are_missing_cells_with_the_command_that_runs_them(default_cells):
    from mtad.report.claims_report import build_report
    from mtad.stats.intervals import NOT_RUN

    if JOINT not in methods.specs():
        pytest.skip(f"{JOINT} is not registered in this checkout")
    report = build_report(default_cells, "claims", PAIR, _settings(variants=[]), theory=False)
    assert {f"{PAIR}/{t}/{JOINT}" for t in ("chat", "cnndm")} == set(report["coverage"]["missing"])
    rows = [r for r in report["claims"] if JOINT in r["methods"]]
    assert len(rows) == 7 and all(r["verdict"] == NOT_RUN for r in rows)
    assert all("missing from" in r["reason"] and "python -m mtad.experiments.claims" in r["reason"] for r in rows)


@pytest.fixture
def without_joint(monkeypatch):
    """The registry as a checkout without block verification's module has it."""
    monkeypatch.setattr(methods, "_REGISTERED", {k: v for k, v in methods._REGISTERED.items() if k != JOINT})


def test_without_the_joint_method_the_config_and_report_work_and_say_what_the_rows_need(default_cells, without_joint):
    from mtad.report.claims_markdown import to_markdown
    from mtad.report.claims_report import build_report
    from mtad.stats.intervals import NOT_RUN

    settings = _settings(variants=[])
    assert JOINT not in settings.methods and JOINT not in settings.planned_methods
    assert settings.unregistered == [JOINT] and len(settings.comparisons) == 2
    report = build_report(default_cells, "claims", PAIR, settings, theory=False)
    coverage = report["coverage"]
    assert (coverage["planned"], coverage["present"], coverage["missing"]) == (12, 12, [])
    rows = [c for c in report["claims"] if JOINT in c["methods"]]
    assert len(rows) == 7
    for row in rows:
        assert row["verdict"] == NOT_RUN and row["interval"] is None
        assert row["reason"] == f"not run: needs {JOINT}, which no module registers here"
    # the paper's rows are untouched: the conventional methods are the same three
    assert _row(report, "MTAD / best of SpS, SpecTr, SpecInfer: tokens/s ratio", "chat")["interval"]["n"] == 150
    lines = [line for line in to_markdown(report).splitlines() if "not registered here" in line]
    assert lines == [
        f"- not registered here: {JOINT}; the rows that compare it are not run "
        "(no module under mtad/decoding/ declares it)"
    ]


def test_the_claims_run_plans_the_registrys_methods_and_every_registered_one_a_comparison_names(without_joint):
    from mtad.report.kind_claims import ReportSettings

    comparison = {"name": "x", "method": "mtad", "against": "sps", "kinds": ["speed"]}
    settings = ReportSettings(methods="sampling,mtad", comparisons=[comparison])
    assert settings.methods == ["sampling", "mtad"] and settings.planned_methods == ["sampling", "mtad", "sps"]
    unknown = ReportSettings(methods=["sampling"], comparisons=[comparison | {"against": JOINT}])
    assert unknown.planned_methods == ["sampling", "mtad"] and unknown.unregistered == [JOINT]
    with pytest.raises(ValueError, match="exactly the keys"):
        ReportSettings(comparisons=[{"method": "mtad", "against": "sps", "kinds": ["speed"]}])
    with pytest.raises(ValueError, match="kinds must be among"):
        ReportSettings(comparisons=[comparison | {"kinds": ["sped"]}])
    with pytest.raises(ValueError, match="a method against itself"):
        ReportSettings(comparisons=[comparison | {"against": "mtad"}])


def test_the_methods_the_claims_config_compares_are_registered_and_every_joint_verifier_is_compared():
    from mtad.paper import CONVENTIONAL

    settings = _settings()
    named = {m for c in settings.comparisons for m in c.methods}
    assert named <= set(methods.specs()), "register these methods or take them out of claims.comparisons"
    assert settings.unregistered == [] and named <= set(settings.methods)
    # a method that verifies another's drafts is compared with that one, and is not among the paper's
    # conventional methods (C3's and C4's "best of")
    compared = {(c.method, c.against) for c in settings.comparisons}
    for name, spec in methods.specs().items():
        if spec.verifies_drafts_of:
            assert (name, spec.verifies_drafts_of) in compared and name not in CONVENTIONAL
    assert JOINT in named and methods.spec(JOINT).verifies_drafts_of == "sps"


def test_a_method_that_verifies_anothers_drafts_is_not_a_conventional_method(monkeypatch):
    from mtad.decoding.params import SpSParams
    from mtad.decoding.sps import SpeculativeSampling
    from mtad.paper import CONVENTIONAL

    monkeypatch.setattr(methods, "_REGISTERED", dict(methods._REGISTERED))
    fields = dict(order=36, color="k", marker="h", settings=SpSParams, lossless=True, drafts="chain")

    class OwnDrafts(SpeculativeSampling):
        spec = methods.MethodSpec(name="own", label="Own", **fields)

    class SpSDrafts(SpeculativeSampling):
        spec = methods.MethodSpec(name="joint", label="Joint", verifies_drafts_of="sps", **fields)

    assert "own" in CONVENTIONAL and "joint" not in CONVENTIONAL and "sps" in CONVENTIONAL
    with pytest.raises(ValueError, match="names another method, not itself"):
        methods.MethodSpec(name="self", label="Self", verifies_drafts_of="self", **fields)
