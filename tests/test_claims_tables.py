"""Intervals in Table 2 and whiskers in the figures, from the committed reference cells."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mtad.report.cells import load_cells
from mtad.report.claims_report import read_report
from mtad.report.tables import INTERVAL_COLUMNS, table2, to_markdown

RUNS = Path(__file__).resolve().parents[1] / "results" / "runs"


@pytest.fixture(scope="module")
def cells():
    found = load_cells(RUNS, experiment="table2")
    if found.empty:
        pytest.skip(f"no committed table2 cells under {RUNS}")
    return found


def test_table2_has_an_interval_per_quality_and_speed_column(cells):
    from mtad.stats.intervals import MIN_N

    df = table2(cells)
    for column in INTERVAL_COLUMNS:
        assert {f"{column}_low", f"{column}_high"} <= set(df.columns)
    for row in df.itertuples():
        if row.method == "sampling" or row.examples < MIN_N:
            continue
        for column in ("perplexity", "tokens_per_s", "speedup_vs_sampling", "block_efficiency"):
            assert getattr(row, f"{column}_low") <= getattr(row, column) <= getattr(row, f"{column}_high"), (
                row.task,
                row.method,
                column,
            )
    spider = df[df["task"] == "spider"].set_index("method")
    # a method against itself has no interval; every spider score is 0: a degenerate [0, 0]
    assert np.isnan(spider.loc["sampling", "speedup_vs_sampling_low"])
    assert spider.loc["mtad", "score_low"] == spider.loc["mtad", "score_high"] == 0.0
    md = to_markdown(df, "table2")
    assert "95% bootstrap interval" in md
    mtad_row = next(line for line in md.splitlines() if line.startswith("| spider | mtad |"))
    assert f"{spider.loc['mtad', 'perplexity']:.3f} [{spider.loc['mtad', 'perplexity_low']:.3f}, " in mtad_row


def test_speedup_interval_is_paired_with_the_baseline_cell(cells):
    from mtad.report.examples import cell_examples
    from mtad.report.tables import cell_intervals

    spider = cells[(cells["task"] == "spider") & (cells["overrides"] == "")].set_index("method")
    mtad, sampling = cell_examples(spider.loc["mtad", "path"]), cell_examples(spider.loc["sampling", "path"])
    interval = cell_intervals(mtad, {"sampling": sampling})["speedup_vs_sampling"]
    expected = (mtad.new_tokens.sum() / mtad.seconds.sum()) / (sampling.new_tokens.sum() / sampling.seconds.sum())
    assert interval.estimate == pytest.approx(expected) and interval.n == len(set(mtad["id"]) & set(sampling["id"]))
    shuffled = sampling.assign(id=list(reversed(sampling["id"])))  # pairing follows ids, not positions
    assert cell_intervals(mtad, {"sampling": shuffled})["speedup_vs_sampling"].low != interval.low


def test_figures_draw_whiskers_where_cells_have_intervals(cells):
    from matplotlib.container import ErrorbarContainer

    from mtad.report import figures
    from mtad.stats.intervals import MIN_N

    fig = figures.speedup_bars(cells)
    whiskers = [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    base = cells[cells["overrides"] == ""]
    tasks_with_intervals = {t for t in base["task"] if (base[base["task"] == t]["examples"] >= MIN_N).all()}
    # per task with intervals: its n - 1 methods other than sampling against sampling, the n - 1 other
    # than SpS against SpS, and all n methods' block efficiency
    from mtad.decoding.registry import study_methods

    n = len(study_methods())
    assert len(whiskers) == (3 * n - 2) * len(tasks_with_intervals) > 0
    fig = figures.quality_vs_speed(cells)
    assert any(isinstance(c, ErrorbarContainer) for ax in fig.axes for c in ax.containers)


def test_no_interval_without_examples():
    from mtad.report.tables import add_intervals

    df = pd.DataFrame(
        {"task": ["t"], "method": ["m"], "pair": ["p"], "machine": ["x"], "path": [None], "score_name": [None]}
    )
    out = add_intervals(df)
    assert out[[f"{c}_low" for c in INTERVAL_COLUMNS]].isna().all().all()


def test_table2_counts_planned_present_and_missing_cells(cells, tmp_path):
    import shutil

    from mtad.decoding.registry import study_methods
    from mtad.report.tables import build_table2

    per_task = len(study_methods())
    planned = 4 * per_task  # the committed run holds every cell of the grid
    md, _ = build_table2(RUNS, tmp_path / "full", experiment="table2")
    assert f"- cells: {planned} planned, {planned} present, 0 missing" in md.read_text()
    partial = tmp_path / "partial"
    shutil.copytree(
        RUNS / "table2" / "smollm2_135m_head" / "spider", partial / "table2" / "smollm2_135m_head" / "spider"
    )
    md, _ = build_table2(partial, tmp_path / "out", experiment="table2")
    text = md.read_text()
    assert f"- cells: {planned} planned, {per_task} present, {planned - per_task} missing from " in text
    assert "cnndm/sps" in text


def test_a_ratio_without_an_interval_shows_the_counts_it_came_from():
    from mtad.report.claims_markdown import _ours

    claim = {"unit": "relative", "beside": {"scores": "MMTAD 0 of 10 vs sampling 1 of 10"}}
    interval = {"estimate": -1.0, "low": None, "reason": "undefined on some resamples (a zero denominator)"}
    text = _ours(claim, interval)
    assert text.startswith("MMTAD 0 of 10 vs sampling 1 of 10") and "100" not in text
    with_bounds = {"estimate": 0.1, "low": -0.1, "high": 0.3}
    assert _ours(claim, with_bounds).startswith("+10.0% [")


def test_the_results_page_and_the_claims_report_show_the_same_table():
    from pathlib import Path

    from mtad.report.claims_markdown import claims_table

    results = Path(__file__).resolve().parents[1] / "results"
    table = "\n".join(claims_table(read_report(results / "claims" / "claims.json")))
    assert table in (results / "claims" / "claims.md").read_text() and table in (results / "README.md").read_text()


def test_table2_header_says_how_its_cells_were_timed_and_what_its_modelled_columns_rest_on(cells):
    from mtad.report.tables import ACCELERATOR, INTERLEAVED, MODELLED_ON, ONE_AFTER_ANOTHER

    md = to_markdown(table2(cells), "table2")
    assert f"cells timed {ONE_AFTER_ANOTHER}" in md  # table2's cells ran one after another
    header = next(line for line in md.splitlines() if line.startswith("| task | method |"))
    assert f"modelled vs sampling ({MODELLED_ON})" in header
    assert f"assumed overhead of {ACCELERATOR.layer_overhead_ms * 1e3:g} µs per layer" in md  # read, not retyped
    interleaved = to_markdown(table2(cells.assign(timing="interleaved")), "table2")
    assert f"cells timed {INTERLEAVED}" in interleaved and ONE_AFTER_ANOTHER not in interleaved
