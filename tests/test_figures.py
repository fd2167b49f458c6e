"""Figures from a synthetic results tree: planned-but-missing cells stay visible, speed-ups are
ratios to the right baseline cell, captions name pair/machine/dtype/counts, files are written."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from mtad.configs import planned_grid
from mtad.decoding.registry import spec, study_methods
from mtad.report import figures
from mtad.report.cells import load_cells
from mtad.report.sweeps import caption, sweep_frame, table2_frame

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return make_results.build(tmp_path_factory.mktemp("results") / "runs")


@pytest.fixture(scope="module")
def cells(runs):
    return load_cells(runs)


def figure_texts(fig: Figure) -> str:
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return "\n".join(t for t in texts if isinstance(t, str))


def test_planned_grids_come_from_the_config_files():
    assert planned_grid("sweeps", "gamma")["method.gamma"] == list(range(1, 9))
    assert planned_grid("sweeps", "threshold")["method"] == ["mtad", "mmtad"]
    assert set(planned_grid("table2")["task"]) == {"spider", "cnndm", "mtbench", "humaneval"}
    assert planned_grid("no_such_experiment") == {}


def test_table2_frame_keeps_every_planned_cell(cells):
    frame = table2_frame(cells)
    assert len(frame) == 4 * len(study_methods())  # every (task, method) of conf/experiment/table2.yaml
    missing = frame[frame["missing"]].set_index(["task", "method"])["status"].to_dict()
    assert missing == {("humaneval", "spectr"): "not run", ("mtbench", "mmtad"): "running"}
    row = frame[(frame["task"] == "cnndm") & (frame["method"] == "mtad")].iloc[0]
    base = frame[(frame["task"] == "cnndm") & (frame["method"] == "sampling")].iloc[0]
    assert row["speedup_vs_sampling"] == pytest.approx(row["tokens_per_s"] / base["tokens_per_s"])


def test_sweep_frame_marks_missing_points_and_uses_the_base_baselines(cells):
    frame = sweep_frame(cells, "gamma")
    assert len(frame) == 3 * 8 and list(frame["method"].unique()) == ["sps", "mtad", "mmtad"]
    gaps = {(r.method, r.value) for r in frame[frame["missing"]].itertuples()}
    assert gaps == {("mtad", 7), ("mmtad", 8)}
    sampling = cells[(cells["experiment"] == "sweeps") & (cells["method"] == "sampling")]["tokens_per_s"].iloc[0]
    row = frame[(frame["method"] == "mtad") & (frame["value"] == 3)].iloc[0]
    assert row["speedup_vs_sampling"] == pytest.approx(row["tokens_per_s"] / sampling)
    # the swept sps cell at gamma=4 wins over the base sps cell (also gamma=4)
    sps4 = frame[(frame["method"] == "sps") & (frame["value"] == 4)]
    assert len(sps4) == 1 and sps4["overrides"].iloc[0] == "method.gamma=4"
    threshold = sweep_frame(cells, "threshold")
    assert set(threshold[threshold["missing"]]["value"]) == {0.9}


def test_sweep_without_sampling_cell_has_no_speedup_but_keeps_points(tmp_path):
    runs = tmp_path / "runs"
    make_results.write_cell(
        runs,
        "sweeps",
        "cnndm",
        "mtad",
        "method.beam_width=2",
        beam_width=2,
        tokens_per_s=30.0,
        block_efficiency=2.0,
        acceptance_rate=0.6,
        mean_accept_length=1.5,
    )
    frame = sweep_frame(load_cells(runs), "beam_width")
    row = frame[(frame["method"] == "mtad") & (frame["value"] == 2)].iloc[0]
    assert not row["missing"] and math.isnan(row["speedup_vs_sampling"])
    assert frame["missing"].sum() == len(frame) - 1
    fig = figures.beam_width_sweep(load_cells(runs))
    assert "sampling cell missing" in figure_texts(fig)


def test_unknown_sweep_lists_the_valid_ones(cells):
    with pytest.raises(ValueError, match="valid: .*beam_width.*gamma.*threshold"):
        sweep_frame(cells, "top_k")


def test_captions_name_pair_machine_dtype_and_counts(cells):
    text = caption(table2_frame(cells))
    for part in (
        "pair tiny_fixture",
        "machine Fixture CPU (2 CPUs, avx2)",
        "dtype float32",
        "cnndm: 2 examples (2 samples) per cell, ≤64 new tokens",
        f"{4 * len(study_methods()) - 2} of {4 * len(study_methods())} planned cells (2 missing)",
    ):
        assert part in text


@pytest.mark.parametrize(
    "make",
    [
        figures.speedup_bars,
        figures.quality_vs_speed,
        figures.gamma_sweep,
        figures.beam_width_sweep,
        figures.threshold_sweep,
        figures.temperature_sweep,
    ],
)
def test_each_figure_has_labels_caption_and_shows_what_is_missing(cells, make):
    fig = make(cells)
    assert isinstance(fig, Figure)
    text = figure_texts(fig)
    assert "pair tiny_fixture" in text and ("dtype float32" in text or "target float32, draft float32" in text)
    for ax in fig.axes:
        ticks_hidden = not any(t.get_visible() and t.get_text() for t in ax.get_xticklabels())  # shares the x below
        assert ax.get_ylabel() and (
            ax.get_xlabel() or not ax.get_xaxis().get_visible() or ax in fig.axes[:1] or ticks_hidden
        )
    if make is not figures.beam_width_sweep:  # the fixture's beam-width sweep is complete
        assert "missing" in text


def test_sweep_draws_an_x_mark_at_each_missing_value(cells):
    fig = figures.gamma_sweep(cells)
    marks = [(line.get_color(), tuple(line.get_xdata())) for line in fig.axes[0].lines if line.get_marker() == "x"]
    assert sorted(x for _, xs in marks for x in xs) == [7, 8]
    assert {c for c, _ in marks} == {spec("mtad").color, spec("mmtad").color}
    lines = {line.get_label(): line for line in fig.axes[0].lines if line.get_label() in ("SpS", "MTAD", "MMTAD")}
    assert math.isnan(lines["MTAD"].get_ydata()[6])  # no line segment across the missing gamma = 7


def test_speedup_bars_show_missing_slots(cells):
    fig = figures.speedup_bars(cells)
    text = figure_texts(fig)
    assert "missing (not run)" in text and "missing (running)" in text
    assert "2.25" in text  # block efficiency of MTAD, written on its bar in the block-efficiency panel


def test_every_bar_is_labelled_with_its_own_height(cells):
    fig = figures.speedup_bars(cells)
    assert [ax.get_ylabel() for ax in fig.axes] == [figures.YLABELS[c] for c in figures.SPEEDUP_PANELS]
    for ax in fig.axes:
        drawn = [p for p in ax.patches if p.get_facecolor()[3] > 0]  # not the hatched "missing" slots
        bars = {round(p.get_x() + p.get_width() / 2, 6): p.get_height() for p in drawn}
        labels = [t for t in ax.texts if t.get_text().replace(".", "", 1).isdigit()]
        assert len(labels) == len(bars) > 0
        for label in labels:
            assert label.get_text() == f"{bars[round(label.get_position()[0], 6)]:.2f}", ax.get_ylabel()


@pytest.mark.slow
def test_build_all_writes_png_and_pdf_and_skips_absent_experiments(runs, tmp_path):
    written = figures.build_all(runs, tmp_path / "figures")
    assert written.pop("skipped") == []
    assert set(written) == set(figures.FIGURE_NAMES)
    for png, pdf in written.values():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
    only_sweeps = tmp_path / "only_sweeps"
    make_results.write_cell(only_sweeps, "sweeps", "cnndm", "sampling")
    make_results.write_cell(only_sweeps, "sweeps", "cnndm", "sps", "method.gamma=2", gamma=2)
    written = figures.build_all(only_sweeps, tmp_path / "figures2")
    skipped = written.pop("skipped")
    assert any("table2" in reason and "no cells" in reason for reason in skipped)
    # a sweep none of whose cells exists is not drawn (a figure of missing marks only)
    assert set(written) == {"sweep_gamma"}
    assert {r.split(":")[0] for r in skipped} >= {"sweep_beam_width", "sweep_threshold", "sweep_stop_below"}


@pytest.mark.slow
def test_make_figures_script(runs, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_figures.py"), "--results", str(runs.parent), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{e}" for n in figures.FIGURE_NAMES for e in ("pdf", "png")
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_figures.py"), "--results", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 1 and "no results at" in proc.stderr


def test_fixture_is_in_the_runner_format(runs):
    """The fixture's metrics.json keys are those mtad.run writes (kept honest against drift)."""
    from mtad.metrics.speed import aggregate_speed

    metrics = json.loads(next(runs.rglob("metrics.json")).read_text())
    expected = {"tokens_per_s", "block_efficiency", "acceptance_rate", "mean_accept_length"}
    assert expected <= set(aggregate_speed([])) and expected <= set(metrics)


def test_threshold_figure_is_about_mtad_and_adds_mmtad_only_when_run(cells, tmp_path):
    runs = tmp_path / "runs"
    make_results.write_cell(runs, "sweeps", "cnndm", "sampling")
    make_results.write_cell(
        runs,
        "sweeps",
        "cnndm",
        "mtad",
        "method.threshold=0.3",
        threshold=0.3,
        block_efficiency=1.5,
        acceptance_rate=0.5,
        mean_accept_length=0.8,
    )
    labels = {line.get_label() for line in figures.threshold_sweep(load_cells(runs)).axes[0].lines}
    assert "MTAD" in labels and "MMTAD" not in labels
    labels = {line.get_label() for line in figures.threshold_sweep(cells).axes[0].lines}
    assert {"MTAD", "MMTAD"} <= labels


@pytest.mark.slow
def test_figures_from_a_real_mtad_run_sweep(tmp_path, suite_data):
    """The runner's own files (tiny random pair, 1 article, 6 tokens): the sweep frame finds the
    cells despite the extra task overrides, and the unrun grid points show as missing."""
    base = [
        f"results_root={tmp_path / 'runs'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        f"hydra.run.dir={tmp_path / 'out'}",
        f"data_root={suite_data}",
        "pair=tiny_llama",
        "limit=1",
        "logger=none",
        "progress=false",
        "threads=1",
        "warmup_tokens=2",
        "per_task.cnndm.max_new_tokens=6",
        "task.article_token_budget=48",
    ]
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    for args in (
        ["-m", "experiment=sweeps", "method=sampling,sps"],
        ["experiment=sweeps", "sweep=beam_width", "method=mtad", "method.beam_width=1,2"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "mtad.run", *args, *base],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    cells = load_cells(tmp_path / "runs")
    frame = sweep_frame(cells, "beam_width")
    done = frame[~frame["missing"]]
    assert {(r.method, r.value) for r in done.itertuples()} == {("mtad", 1), ("mtad", 2)}
    assert len(frame) == 2 * 4  # mtad and mmtad x W in {1, 2, 4, 8}
    assert done["context"].iloc[0] == "per_task.cnndm.max_new_tokens=6,task.article_token_budget=48"
    assert (done["speedup_vs_sampling"] == done["tokens_per_s"] / done["sampling_tokens_per_s"]).all()
    assert done["speedup_vs_sampling"].notna().all()
    text = figure_texts(figures.beam_width_sweep(cells))
    assert "pair tiny_llama" in text and "≤6 new tokens" in text and "MMTAD W=1, 2, 4, 8" in text


def test_a_score_panel_with_nothing_to_show_is_dropped_with_its_reason(tmp_path):
    runs = tmp_path / "runs"
    for method in ("sampling", "mtad"):
        make_results.write_cell(runs, "table2", "mtbench", method, score=None, tokens_per_s=10.0)
        make_results.write_cell(runs, "table2", "spider", method, score=0.0)
        make_results.write_cell(runs, "table2", "cnndm", method, score=0.2)
    fig = figures.quality_vs_speed(load_cells(runs))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert sum("perplexity" in label for label in labels) == 4  # every task keeps its perplexity panel
    assert [label for label in labels if "perplexity" not in label] == ["ROUGE-L F1"]  # CNN/DM's score only
    text = figure_texts(fig)
    assert "no score panel for Spider: every method scores 0 (execution accuracy (fraction))" in text
    assert "no score panel for MT-Bench: no method has a score" in text
    assert "no perplexity:\nSpS (not run)" in text  # planned methods without a cell are listed by name
    written = figures.build_all(runs, tmp_path / "figures")
    assert (
        "table2_quality_speed's score panel for Spider: every method scores 0 (execution accuracy (fraction))"
        in (written["skipped"])
    )


def test_which_score_panels_are_empty_and_why():
    nan = math.nan
    rows = [  # task, method, missing, score, score name, why the score is missing
        ("spider", "sampling", False, 0.0, "exec_acc", None),
        ("spider", "sps", False, 0.0, "exec_acc", None),
        ("mtbench", "sampling", False, nan, "judge_score", "no judge configured"),
        ("mtbench", "sps", True, nan, None, None),
        ("humaneval", "sampling", False, 0.1, "pass@1", None),
        ("humaneval", "sps", False, 0.0, "pass@1", None),
        ("cnndm", "sampling", False, 0.0, "rougeL", None),
        ("cnndm", "sps", False, nan, "rougeL", "not scored"),
        ("chat", "sampling", True, nan, None, None),
    ]
    frame = pd.DataFrame(rows, columns=["task", "method", "missing", "score", "score_name", "score_missing_reason"])
    assert figures.empty_score_panels(frame) == {
        "spider": "every method scores 0 (execution accuracy (fraction))",
        "mtbench": "no method has a score (no judge configured)",
        "cnndm": "every method scores 0 or has none (ROUGE-L F1)",
        "chat": "no finished cell",
    }  # HumanEval's 0.1 is something to show


def slow_cells(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A Table 2 frame where SpS runs at half sampling's speed, and its cells: 2 tokens per target
    call, but a block costs 4 sampling steps (3.2 in the target call, 0.8 in the drafts)."""
    cell = tmp_path / "sps"
    cell.mkdir()
    env = {"machine": "Fixture CPU (2 CPUs)", "cpu": "Fixture CPU", "cpu_count": 2, "cpu_isa": ["avx2"], "gpus": []}
    (cell / "env.json").write_text(json.dumps({**env, "dtype": "bfloat16"}))
    columns = [
        "task",
        "method",
        "block_efficiency",
        "decode_seconds",
        "target_seconds",
        "draft_seconds",
        "target_calls",
    ]
    cells = pd.DataFrame(
        [("cnndm", "sampling", 1.0, 10.0, 10.0, 0.0, 100), ("cnndm", "sps", 2.0, 20.0, 16.0, 4.0, 50)], columns=columns
    ).assign(path=[None, str(cell)], machine="Fixture CPU (2 CPUs)")
    frame = pd.DataFrame(
        [("cnndm", "sampling", False, 1.0, 2.0), ("cnndm", "sps", False, 0.5, 1.0)],
        columns=["task", "method", "missing", "speedup_vs_sampling", "speedup_vs_sps"],
    )
    return frame, cells


def test_a_speed_up_below_one_is_explained_in_the_cells_figures(tmp_path):
    frame, cells = slow_cells(tmp_path)
    why, sps, machine = figures.slowdown_notes(frame, cells)
    assert why.startswith("why below 1×: speed-up = (tokens per target call ÷ the baseline's) ÷ (a block's time")
    assert sps == (
        "SpS below 1× vs sampling on 1 task(s) (0.50×): 2.00 tokens per target call, but a block takes 4.00 "
        "sampling steps (target call 3.20, drafts 0.80)"
    )
    assert machine == "measured on Fixture CPU (2 CPUs, avx2), target bfloat16"
    faster = frame.assign(speedup_vs_sampling=[1.0, 1.5])
    assert figures.slowdown_notes(faster, cells) == []
    # cells that did not time their phases: the block's share of each is left out, not guessed
    untimed = figures.slowdown_notes(frame, cells.drop(columns=["target_seconds", "draft_seconds"]))
    assert untimed[1].endswith("but a block takes 4.00 sampling steps")


def test_the_speed_up_figure_says_why_a_bar_is_below_one(tmp_path):
    runs = tmp_path / "runs"
    make_results.write_cell(runs, "table2", "cnndm", "sampling", tokens_per_s=20.0)
    make_results.write_cell(runs, "table2", "cnndm", "sps", tokens_per_s=10.0, block_efficiency=1.5)
    text = figure_texts(figures.speedup_bars(load_cells(runs)))
    assert "SpS below 1× vs sampling on 1 task(s) (0.50×): 1.50 tokens per target call" in text
    assert "measured on Fixture CPU (2 CPUs, avx2), target float32" in text


def test_sweep_frame_of_a_sweep_not_yet_run_has_every_column(cells):
    frame = sweep_frame(cells[cells["overrides"] == ""], "threshold")
    assert frame["missing"].all() and frame[["tokens_per_s", "perplexity", "acceptance_rate"]].isna().all().all()


def test_quality_axes_stay_within_what_each_quantity_can_take(tmp_path):
    for method, score in (("sampling", 0.0), ("sps", 0.1), ("mtad", 0.0)):  # scores at their bound, 0
        make_results.write_cell(tmp_path, "table2", "spider", method, score=score, perplexity=1.02)
    fig = figures.quality_vs_speed(load_cells(tmp_path))
    for ax in fig.axes:
        if not ax.axison:  # a panel with nothing to plot shows only its note
            continue
        bottom, top = ax.get_ylim()
        label = ax.get_ylabel()
        if "fraction" in label or "F1" in label:
            assert 0 <= bottom < top <= 1, label
        elif "perplexity" in label:
            assert bottom >= 1, label


def test_a_sweep_footer_says_which_model_ran_in_which_dtype(tmp_path):
    from mtad.report.sweeps import caption, sweep_frame

    for method in ("sampling", "sps"):
        cell = make_results.write_cell(tmp_path, "sweeps", "cnndm", method)
        env = json.loads((cell / "env.json").read_text())
        env["dtype"] = "bfloat16,float32"
        env["cell"]["pair"] |= {"target_dtype": "float32", "draft_dtype": "bfloat16"}
        (cell / "env.json").write_text(json.dumps(env))
    text = caption(sweep_frame(load_cells(tmp_path), "gamma"))
    assert "target float32, draft bfloat16" in text and "dtype bfloat16,float32" not in text


def test_the_temperature_sweep_divides_by_sampling_at_the_same_temperature(tmp_path):
    runs = tmp_path / "runs"
    for t, sampling_speed, sps_speed in ((0.5, 40.0, 60.0), (1.0, 20.0, 25.0)):
        overrides = "" if t == 1.0 else f"method.temperature={t}"  # T = 1 is the default: the base cells
        cell = dict(temperature=t, perplexity=3.0 + t)
        make_results.write_cell(runs, "sweeps", "cnndm", "sampling", overrides, tokens_per_s=sampling_speed, **cell)
        make_results.write_cell(runs, "sweeps", "cnndm", "sps", overrides, tokens_per_s=sps_speed, **cell)
    cells = load_cells(runs)
    frame = sweep_frame(cells, "temperature").set_index(["method", "value"])
    assert frame.loc[("sps", 0.5), "speedup_vs_sampling"] == pytest.approx(1.5)  # over sampling at 0.5, not 1.0
    assert frame.loc[("sps", 1.0), "speedup_vs_sampling"] == pytest.approx(1.25)
    assert frame.loc[("sps", 0.0), "missing"] and math.isnan(frame.loc[("mtad", 0.7), "speedup_vs_sampling"])
    fig = figures.temperature_sweep(cells)
    assert [ax.get_ylabel() for ax in fig.axes[:4]] == [
        figures.YLABELS[c] for c in ("block_efficiency", "acceptance_rate", "perplexity", "speedup_vs_sampling")
    ]
    perplexity = fig.axes[2]
    assert not [line for line in perplexity.lines if line.get_linestyle() == "--"]  # sampling is a line, no level
    assert {figures.label("sampling"), "SpS"} <= {line.get_label() for line in perplexity.lines}
    assert "temperature T (0 = greedy)" in fig.axes[0].get_xlabel()
