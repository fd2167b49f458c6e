"""Table 2's adaptive rows: conf/experiment/table2.yaml runs each lossless method with adaptive drafting at
its registry threshold beside its grid (`beside_grid`, mtad.runner.multirun), and the table shows those
cells as rows after each task's fixed rows, their speed-ups over the fixed cells; a table without them
says so in one line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mtad.configs import planned_beside_grid
from mtad.decoding.registry import specs, study_methods
from mtad.report.tables import build_table2
from mtad.runner.multirun import all_jobs, beside_launches

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)
ADAPTIVE = {"sps": "sps (adaptive, stop_below 0.3)", "spectr": "spectr (adaptive, stop_below 0.2)"}


def test_table2_runs_each_lossless_methods_adaptive_cells_at_the_registrys_threshold():
    wanted = [[f"method={m}", s.adaptive_override] for m, s in specs().items() if s.lossless and s.adaptive_stop]
    assert [m for m, _ in wanted] == ["method=sps", "method=blockverify", "method=spectr", "method=specinfer"]
    assert planned_beside_grid("table2") == wanted
    assert planned_beside_grid("table2_full") == [] and planned_beside_grid("no_such_experiment") == []


def test_the_cells_beside_the_grid_follow_the_command_line():
    launches = beside_launches(["experiment=table2", "task=cnndm,spider"])
    assert launches[0] == [
        "experiment=table2",
        "task=cnndm,spider",
        "method=sps",
        "method.stop_below=0.3",
        "beside_grid=[]",
    ]
    assert beside_launches(["experiment=table2", "method=mtad"]) == []  # the command line leaves them out
    assert [b[-3] for b in beside_launches(["experiment=table2", "method=sps,mtad"])] == ["method=sps"]
    assert beside_launches(["experiment=table2", "method=sps", "method.stop_below=0.1"]) == []
    assert beside_launches(launches[0]) == []  # a launch is one grid
    assert len(all_jobs(["experiment=table2", "method=sps"])) == 4 + 4  # fixed and adaptive, on every task


def fixture_cells(root: Path, adaptive: dict[str, tuple[str, ...]]) -> Path:
    """The fixture's Table 2 cells and, per method in ``adaptive``, its adaptive cell on those tasks
    (tokens/s twice its fixed cell's)."""
    make_results.build(root)
    for method, tasks in adaptive.items():
        stop = specs()[method].adaptive_stop
        for t, task in enumerate(tasks):
            speed = 2 * 20.0 * make_results.SPEED[method] * (1 + 0.1 * list(make_results.TOKENS).index(task))
            make_results.write_cell(
                root, "table2", task, method, f"method.stop_below={stop}", tokens_per_s=speed, stop_below=stop
            )
    return root


def built(root: Path, out: Path) -> tuple[str, pd.DataFrame]:
    md, csv = build_table2(root, out, "table2", allow_mixed_provenance=True)
    return md.read_text(), pd.read_csv(csv)


def test_adaptive_rows_follow_each_tasks_fixed_rows_with_speedups_over_the_fixed_cells(tmp_path):
    root = fixture_cells(tmp_path / "runs", {"sps": ("spider", "cnndm", "mtbench", "humaneval"), "spectr": ("cnndm",)})
    md, table = built(root, tmp_path / "tables")
    cnndm = [line.split(" | ")[1] for line in md.splitlines() if line.startswith("| cnndm |")]
    assert cnndm == [*study_methods(), ADAPTIVE["sps"], ADAPTIVE["spectr"]]
    rows = table[table["task"] == "cnndm"]
    rows = rows.set_index(rows["method"] + "/" + rows["variant"].fillna(""))
    fixed, adaptive = rows.loc["sps/"], rows.loc["sps/adaptive, stop_below 0.3"]
    assert adaptive["speedup_vs_sps"] == pytest.approx(2.0)  # over its fixed self
    assert adaptive["speedup_vs_sampling"] == pytest.approx(2 * fixed["speedup_vs_sampling"])
    assert fixed["speedup_vs_sps"] == 1.0  # the fixed row still divides by itself, not the adaptive one
    note = next(line for line in md.splitlines() if line.startswith("- adaptive rows"))
    assert "sps stop_below 0.3, blockverify stop_below 0.3, spectr stop_below 0.2, specinfer stop_below 0.3" in note
    planned = [
        f"{t}/{m}" for t in ("spider", "cnndm", "mtbench", "humaneval") for m in ("blockverify", "spectr", "specinfer")
    ]
    absent = ", ".join(c for c in planned if c != "cnndm/spectr")
    assert note.endswith(f"5 of 16 present; absent: {absent}")
    cells = 4 * len(study_methods())  # the grid's count: the adaptive cells are no grid cells
    assert f"- cells: {cells} planned, {cells - 1} present" in md


def test_a_table_without_adaptive_cells_says_so_in_one_line(tmp_path):
    md, table = built(fixture_cells(tmp_path / "runs", {}), tmp_path / "tables")
    assert table["variant"].isna().all() and "adaptive, stop_below" not in md.split("| task |", 1)[1]
    (note,) = [line for line in md.splitlines() if "adaptive rows" in line]
    assert note.endswith(
        "none, no `<method>/method.stop_below=<t>` cell has run; `mtad-run experiment=table2` runs them beside the grid"
    )


def test_the_committed_table2_renders_from_the_committed_cells(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # as make table names the runs: a missing cell's note holds that path
    md, table = built(Path("results") / "runs", tmp_path)
    committed = (REPO / "results" / "tables" / "table2.md").read_text()
    assert md.split("- built:")[1].split("\n", 1)[1] == committed.split("- built:")[1].split("\n", 1)[1]
    adaptive = [name for name, spec in specs().items() if spec.adaptive_stop is not None and spec.lossless]
    tasks = 4
    assert len(table) == tasks * (len(study_methods()) + len(adaptive))  # the grid, then the adaptive rows
    assert sorted(table.loc[table["variant"].notna(), "method"].unique()) == sorted(adaptive)


@pytest.mark.slow
def test_an_experiment_runs_its_cells_beside_its_grid_and_its_table_shows_them(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text(
        "# @package _global_\nexperiment_name: mine\nlimit: 2\nper_task:\n  chat: {max_new_tokens: 8}\n"
        "beside_grid:\n  - [method=sps, method.stop_below=0.3]\n"
        "hydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      method: sampling,sps\n      task: chat\n"
    )
    args = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "experiment=mine", "pair=tiny_llama", "logger=none"]
    args += ["energy=none", "progress=false", "warmup_tokens=0", f"results_root={tmp_path / 'runs'}"]
    args += [f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "mtad.run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    cells = tmp_path / "runs" / "mine" / "tiny_llama" / "chat"
    assert sorted(str(p.parent.relative_to(cells)) for p in cells.rglob("metrics.json")) == [
        "sampling",
        "sps",
        "sps/method.stop_below=0.3",
    ]
    log = proc.stdout + proc.stderr
    assert (
        "cell 2 of 3 (mine/tiny_llama/chat/sps)" in log
        and "cell 3 of 3 (mine/tiny_llama/chat/sps/method.stop_below=0.3)" in log
    )
    md, _ = build_table2(tmp_path / "runs", tmp_path / "tables", "mine", allow_mixed_provenance=True)
    assert "| chat | sps (adaptive, stop_below 0.3) |" in md.read_text()
