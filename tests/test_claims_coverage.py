"""A claims report built from part of an experiment's cells keeps every claim row: a row whose
cells are absent says "not run" and names them, and the header counts planned, present and missing
cells (from the committed claims cells: one cell copied into a fresh root)."""

from pathlib import Path

import pytest
from claims_cells import copy_cells

from mtad.report.claims_report import read_report

REPO = Path(__file__).resolve().parents[1]
CLAIMS = REPO / "results" / "runs" / "claims"


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    from dataclasses import replace

    from mtad.experiments.claims import claims_config
    from mtad.report.claims_report import build_report

    cell = CLAIMS / "smollm2_135m_head" / "chat" / "mtad"
    if not cell.is_dir():
        pytest.skip(f"no committed claims cells under {CLAIMS}")
    root = tmp_path_factory.mktemp("partial")
    copy_cells(cell, root / "claims" / "smollm2_135m_head" / "chat" / "mtad")  # MTAD's cell alone
    cfg, settings, _ = claims_config(["experiment=claims"])
    return build_report(root, "claims", cfg.pair.name, replace(settings.report, resamples=199)), root


def test_every_measured_claim_row_appears_and_absent_cells_say_not_run(partial):
    from mtad.report.kind_claims import EXTENSION
    from mtad.stats.intervals import NOT_MEASURABLE, NOT_RUN

    report, root = partial
    committed = read_report(REPO / "results" / "claims" / "claims.json")

    def measured(rows):
        return [(c["claim"], c["comparison"].split(":")[0], c["task"]) for c in rows if c["task"] != "tiny model"]

    # the committed report's rows, the variants' included (their cells left out here)
    variants = [c for c in report["claims"] if c["paper"] == EXTENSION]
    assert measured(report["claims"]) == measured(committed["claims"])
    assert len(variants) == 12 and all(c["verdict"] == NOT_RUN for c in variants)
    for claim in report["claims"]:
        if claim["task"] == "cnndm" or (claim["task"] == "chat" and claim["claim"] in ("C1", "C3", "C4")):
            assert claim["verdict"] == NOT_RUN, claim
            assert "missing from" in claim["reason"] and str(root / "claims") in claim["reason"]
            assert (
                f"`python -m mtad.experiments.claims experiment=claims pair=smollm2_135m_head results_root={root}`"
                in (claim["reason"])
            )
            assert claim["verdict"] != NOT_MEASURABLE
    theory = [c for c in report["claims"] if c["task"] == "tiny model"]
    assert [c["claim"] for c in theory] == ["C5", "C6"] and all(c["verdict"] == NOT_RUN for c in theory)


def test_the_header_counts_planned_present_and_missing_cells(partial):
    from mtad.report.claims_markdown import to_markdown

    report, _ = partial
    coverage = report["coverage"]
    assert coverage["present"] == 1 and coverage["planned"] == coverage["present"] + len(coverage["missing"])
    assert "smollm2_135m_head/cnndm/sps" in coverage["missing"]
    text = to_markdown(report)
    assert f"- cells: {coverage['planned']} planned, 1 present, {len(coverage['missing'])} missing" in text
    assert "(add it to claims.methods)" not in text  # sps is in claims.methods: its cell is what is missing


def test_rows_of_the_suites_own_extension_carry_no_verdict_and_versions_are_named(partial):
    from mtad.paper import CLAIMS
    from mtad.report.claims_markdown import to_markdown
    from mtad.stats.intervals import NO_VERDICT, NOT_RUN

    report, _ = partial
    assert [c for c in CLAIMS if not c.stated] == [c for c in CLAIMS if c.claim == "C1" and c.method == "mmtad"]
    quality = next(c for c in CLAIMS if c.claim == "C2" and c.method == "mtad")
    assert '"our method"' in quality.paper and quality.version == "iclr-final"
    text = to_markdown(report)
    assert "arXiv v2–v4" in text and "https://arxiv.org/abs/2407.09722v4" in text
    mmtad_chat = next(
        c for c in report["claims"] if c["claim"] == "C1" and c["task"] == "chat" and "MMTAD" in c["comparison"]
    )
    assert mmtad_chat["verdict"] in (NO_VERDICT, NOT_RUN)


def test_a_measured_extension_row_gets_no_verdict_whatever_its_interval():
    from mtad.paper import CLAIMS
    from mtad.report.claim_row import Claim
    from mtad.stats import intervals as iv

    extension = next(c for c in CLAIMS if not c.stated)
    claim = Claim.of(extension, "MMTAD vs sampling: PPL ratio − 1", "chat", "claims")
    claim.interval = iv.bootstrap_interval(iv.mean, [[-0.3, -0.2, -0.25, -0.28, -0.22]], resamples=199)
    assert claim.finish().verdict == iv.NO_VERDICT and "extension" in claim.reason


def test_the_claims_section_splits_into_run_and_report_settings_and_refuses_unknown_keys():
    from omegaconf import OmegaConf

    from mtad.experiments.claims import ClaimsSettings

    cfg = OmegaConf.create({"claims": {"tasks": ["chat"], "max_minutes": 5, "resamples": 99, "theory": {"gamma": 2}}})
    settings = ClaimsSettings.from_config(cfg)
    assert (settings.tasks, settings.max_minutes, settings.theory) == (["chat"], 5, {"gamma": 2})
    assert (settings.report.tasks, settings.report.resamples) == (["chat"], 99)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['resample'\].*max_minutes.*resamples"):
        ClaimsSettings.from_config(OmegaConf.create({"claims": {"resample": 99}}))
