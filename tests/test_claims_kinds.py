"""C1 to C4 as one loop over the claim kinds: the committed cells give the committed rows, and the
experiment's variants (adaptive drafting, the official implementation's options) get rows beside
the defaults: "not run" with the command that runs them where their cells are absent, measured and
without a verdict where they are present. The modelled speed ratio names the assumption it rests on."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from claims_cells import copy_cells

from mtad.report.claims_report import read_report

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "results" / "runs"
COMMITTED = REPO / "results" / "claims" / "claims.json"
PAIR = "smollm2_135m_head"
CELLS = RUNS / "claims" / PAIR


def _chat_prompts() -> int:
    """The chat prompts of the committed cells (one record per prompt)."""
    return len((CELLS / "chat" / "sampling" / "samples.jsonl").read_text().splitlines())


def _settings(**changes):
    from mtad.experiments.claims import claims_config

    _, settings, _ = claims_config(["experiment=claims"])
    return replace(settings.report, **changes)


def _as_stored(report: dict) -> dict:
    """The report as its JSON file holds it (tuples as lists)."""
    return json.loads(json.dumps(report, ensure_ascii=False, default=str))


def _to_12_digits(value):
    """Every float to 12 significant digits: a mean's last bits follow the CPU's SIMD width (numpy
    sums in another order on AVX2 than on AVX-512), nothing a report shows or a verdict reads."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _to_12_digits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_12_digits(v) for v in value]
    return value


def _measured(rows: list[dict]) -> list[dict]:
    """C1 to C4, the rows measured from cells."""
    return [r for r in rows if r["claim"] in ("C1", "C2", "C3", "C4")]


@pytest.fixture(scope="module")
def rebuilt():
    """The report from the committed cells at the committed settings (C5 and C6 left out)."""
    from mtad.report.claims_report import build_report

    if not COMMITTED.is_file() or not CELLS.is_dir():
        pytest.skip("no committed claims cells or report")
    committed = read_report(COMMITTED)
    settings = _settings(resamples=committed["resamples"], confidence=committed["confidence"])
    report = _as_stored(build_report(RUNS, "claims", PAIR, settings, theory=False))
    # a "not run" row names the root read, which the committed report read as `results/runs`
    as_committed = json.dumps(report, ensure_ascii=False).replace(str(RUNS), committed["results_root"])
    return json.loads(as_committed), committed


def test_the_loop_gives_the_committed_rows_from_the_committed_cells(rebuilt):
    report, committed = rebuilt
    ours, expected = _measured(report["claims"]), _measured(committed["claims"])
    counts = {c: sum(r["claim"] == c and bool(r["version"]) for r in expected) for c in ("C1", "C2", "C3", "C4")}
    assert counts == {"C1": 4, "C2": 8, "C3": 6, "C4": 4}
    # every row of the committed report, the variants' and comparisons' included, field by field: intervals (seeded
    # bootstraps), verdicts, reasons, beside
    assert _to_12_digits(ours) == _to_12_digits(expected)
    speed = next(r for r in ours if r["comparison"] == "MTAD / SpS: tokens/s ratio" and r["task"] == "chat")
    assert speed["beside"]["block_efficiency_ratio"]["n"] == _chat_prompts()
    assert speed["beside"]["timing"].startswith("interleaved")
    zero = next(r for r in ours if r["task"] == "spider" and r["comparison"].startswith("MTAD"))
    assert zero["verdict"] == "not measurable here" and zero["reason"].startswith("the target scores 0")


def test_the_committed_run_measures_every_variant_and_gives_its_rows_no_verdict(rebuilt):
    from mtad.report.kind_claims import EXTENSION
    from mtad.stats.intervals import NO_VERDICT, NOT_RUN

    report, _ = rebuilt
    rows = [r for r in report["claims"] if r["paper"] == EXTENSION]
    assert sorted({(r["claim"], r["comparison"].split(":")[0]) for r in rows}) == [
        ("C1", "MMTAD (official options, beam_weighting=official_softmax, stop_rule=block) vs MMTAD"),
        ("C1", "MTAD (official options, beam_weighting=official_softmax, stop_rule=block) vs MTAD"),
        ("C3", "MMTAD (official options, beam_weighting=official_softmax, stop_rule=block) / MMTAD"),
        ("C3", "MTAD (adaptive, stop_below=0.03) / MTAD"),
        ("C3", "MTAD (official options, beam_weighting=official_softmax, stop_rule=block) / MTAD"),
        ("C3", "SpS (adaptive, stop_below=0.3) / SpS"),
    ]
    assert len(rows) == 12  # each on both prompt sets
    for row in rows:
        assert row["verdict"] == NO_VERDICT and row["interval"] is not None and not row["stated"]
        assert "extension" in row["reason"]
    # the comparisons' method (block verification) ran beside the others: every planned cell is there,
    # and the comparisons' rows are measured, without a verdict
    coverage = report["coverage"]
    assert (coverage["planned"], coverage["present"], coverage["missing"]) == (22, 22, [])
    compared = [r for r in report["claims"] if r["version"] == "" and r["paper"] != EXTENSION]
    assert len(compared) == 7
    for row in compared:
        assert row["verdict"] == NO_VERDICT and row["interval"] is not None and row["verdict"] != NOT_RUN


@pytest.fixture(scope="module")
def with_variant_cells(tmp_path_factory):
    """The committed chat cells, and two variant cells made from them: adaptive MTAD is MTAD's cell
    with every generation's seconds scaled by 0.8 (the same tokens in less time), MTAD with the
    official options is MMTAD's cell (another perplexity on the same prompts)."""
    from mtad.report.claims_report import build_report

    if not CELLS.is_dir():
        pytest.skip(f"no committed claims cells under {CELLS}")
    root = tmp_path_factory.mktemp("variants")
    chat = root / "claims" / PAIR / "chat"
    # the committed variant cells left out: this fixture makes its own
    copy_cells(CELLS / "chat", chat)
    adaptive = chat / "mtad" / "method.stop_below=0.03"
    copy_cells(CELLS / "chat" / "mtad", adaptive)
    records = [json.loads(line) for line in (adaptive / "samples.jsonl").read_text().splitlines()]
    for record in records:
        for turn in (t for s in record["samples"] for t in s["turns"]):
            turn["stats"]["seconds"] *= 0.8
    (adaptive / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    copy_cells(CELLS / "chat" / "mmtad", chat / "mtad" / "method.beam_weighting=official_softmax,stop_rule=block")
    report = build_report(root, "claims", PAIR, _settings(resamples=199, tasks=["chat"]), theory=False)
    return _as_stored(report), root


def _row(report: dict, comparison: str) -> dict:
    return next(r for r in report["claims"] if r["comparison"].startswith(comparison))


def test_present_variant_cells_give_measured_rows_without_a_verdict(with_variant_cells):
    from mtad.stats.intervals import NO_VERDICT, NOT_RUN

    report, root = with_variant_cells
    adaptive = _row(report, "MTAD (adaptive, stop_below=0.03) / MTAD: tokens/s ratio")
    # the same tokens in 0.8 of the time, prompt by prompt: 1.25 in every resample
    assert adaptive["interval"]["estimate"] == pytest.approx(1.25) and adaptive["interval"]["n"] == _chat_prompts()
    assert adaptive["beside"]["block_efficiency_ratio"]["estimate"] == pytest.approx(1.0)
    assert adaptive["verdict"] == NO_VERDICT and "extension" in adaptive["reason"]
    assert adaptive["paper_value"] is None and adaptive["version"] == ""

    official = _row(report, "MTAD (official options, beam_weighting=official_softmax, stop_rule=block) vs MTAD: PPL")
    ppl = {
        m: json.loads((root / "claims" / PAIR / "chat" / m / "metrics.json").read_text())["perplexity"]
        for m in ("mtad", "mmtad")
    }
    assert official["interval"]["estimate"] == pytest.approx(ppl["mmtad"] / ppl["mtad"] - 1, rel=1e-6)
    assert official["verdict"] == NO_VERDICT and official["methods"] == [
        "mtad/method.beam_weighting=official_softmax,stop_rule=block",
        "mtad",
    ]
    assert _row(report, "MTAD (official options, beam_weighting=official_softmax, stop_rule=block) / MTAD")["interval"][
        "estimate"
    ]
    # the variants whose cells are absent still have their rows, "not run"
    assert _row(report, "SpS (adaptive, stop_below=0.3) / SpS")["verdict"] == NOT_RUN
    assert report["design"]["tasks"]["chat"]["examples_per_method"]["mtad/method.stop_below=0.03"] == _chat_prompts()


def test_the_markdown_shows_the_variant_rows_and_the_modelled_ratios_assumption(with_variant_cells):
    from mtad.metrics.cost_model import ACCELERATORS, DEFAULT_ACCELERATOR
    from mtad.report.claims_markdown import to_markdown

    report, _ = with_variant_cells
    text = to_markdown(report)
    line = next(line for line in text.splitlines() if "| MTAD (adaptive, stop_below=0.03) / MTAD" in line)
    assert f"| 1.25× [1.25×, 1.25×] | {_chat_prompts()} | **no verdict** |" in line
    assert "block efficiency ratio 1.00×" in line
    device = ACCELERATORS[DEFAULT_ACCELERATOR]
    overhead = f"{1e3 * device.layer_overhead_ms:g} µs per layer per forward (assumed)"
    assert f"on an {device.name} roofline with {overhead}" in line and "not measured" in line
    assert "modelled from the counts (block efficiency, draft rows)" in line


def test_the_modelled_ratio_records_the_cost_models_assumption():
    from mtad.metrics.cost_model import ACCELERATORS, DEFAULT_ACCELERATOR
    from mtad.report.claims_markdown import _modelled

    device = ACCELERATORS[DEFAULT_ACCELERATOR]
    recorded = {"accelerator": device.name, "ratio": 1.07, "layer_overhead_ms": device.layer_overhead_ms}
    assert _modelled(recorded) == (
        f"modelled from the counts (block efficiency, draft rows) on an {device.name} roofline with "
        f"{1e3 * device.layer_overhead_ms:g} µs per layer per forward (assumed): 1.07×; not measured"
    )


def test_each_kind_agrees_with_the_papers_claims_of_it():
    from mtad.paper import CLAIMS
    from mtad.report.kind_claims import KINDS

    assert {k.name for k in KINDS} == {c.kind for c in CLAIMS}
    for kind in KINDS:
        for claim in kind.rows():
            assert (claim.claim, claim.unit, claim.null, claim.direction) == (
                kind.claim,
                kind.unit,
                kind.null,
                kind.direction,
            )


def test_the_adaptive_variants_run_at_the_registrys_thresholds():
    from mtad.decoding.registry import spec

    adaptive = [v for v in _settings().variants if v.name == "adaptive"]
    assert adaptive and all(v.overrides == (spec(v.method).adaptive_override,) for v in adaptive)


def test_a_variant_is_refused_where_it_names_no_cell_of_its_own_or_an_unknown_kind():
    from mtad.report.kind_claims import ReportSettings

    def variant(**changes):
        return {"name": "x", "method": "mtad", "overrides": ["method.gamma=3"], "kinds": ["speed"]} | changes

    assert ReportSettings(variants=[variant()]).variants[0].key == "mtad/method.gamma=3"
    with pytest.raises(ValueError, match="change nothing generated"):
        ReportSettings(variants=[variant(overrides=["limit=3"])])
    with pytest.raises(ValueError, match="kinds must be among"):
        ReportSettings(variants=[variant(kinds=["sped"])])
    with pytest.raises(ValueError, match="exactly the keys"):
        ReportSettings(variants=[variant(kind=["speed"])])


def test_the_runner_writes_each_variant_where_the_report_reads_it():
    from omegaconf import OmegaConf

    from mtad.configs import compose
    from mtad.experiments.interleaved import cell_configs, columns

    variants = _settings().variants
    keys = columns(["sampling", "mtad"], [(v.method, v.overrides) for v in variants])
    assert list(keys)[2:] == [v.key for v in variants]
    official = next(v for v in variants if v.name == "official options" and v.method == "mtad")
    overrides = ["experiment=claims_tiny"]
    cfgs = cell_configs(overrides, ["sampling"], ["chat", "cnndm"], [(official.method, official.overrides)])
    cfg = cfgs[("cnndm", official.key)]
    assert cfg.stop_rule == "block" and cfg.method.beam_weighting == "official_softmax"
    assert cfgs[("cnndm", "sampling")].stop_rule == "eos"  # run-level, yet the variant's cells alone
    reference = compose([*overrides, *official.overrides, "task=cnndm", "method=mtad"])
    assert OmegaConf.to_container(cfg, resolve=True) == OmegaConf.to_container(reference, resolve=True)
    with pytest.raises(ValueError, match="not the task"):
        columns(["mtad"], [("mtad", ("task.max_new_tokens=4",))])
