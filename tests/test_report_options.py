"""The report scripts share their options (mtad/report/roots.py): --results names a results root or its
runs folder alike and says which it read, outputs go beside the runs read (never into the committed
results/tables or results/figures by default), and an experiment whose cells all carry overrides is
named with its override sets and the --overrides that picks one."""

import csv
import importlib.util
from pathlib import Path

import pytest

from mtad.report import roots

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def override_only_cells(root: Path) -> Path:
    """An experiment `mypair` run twice, each time with a pair setting on the command line: no base cell."""
    runs = root / "runs"
    for overrides, speed in (("pair.target_dtype=bfloat16", 30.0), ("pair.target_dtype=float32", 10.0)):
        for method in ("sampling", "sps", "mtad"):
            make_results.write_cell(runs, "mypair", "cnndm", method, overrides, tokens_per_s=speed)
    return runs


def test_a_results_root_and_its_runs_folder_mean_the_same(tmp_path):
    runs = tmp_path / "mine" / "runs"
    make_results.write_cell(runs, "table2", "cnndm", "sampling")
    assert roots.runs_folder(tmp_path / "mine") == runs and roots.runs_folder(runs) == runs
    assert roots.out_folder(runs, "tables") == tmp_path / "mine" / "tables"
    assert roots.out_folder(roots.REFERENCE_RUNS, "figures") == REPO / "results" / "local" / "figures"
    assert roots.runs_folder("mine", base=tmp_path) == runs  # a relative name, from the base given


def test_a_missing_or_empty_folder_is_one_line_naming_it_and_the_command_that_fills_it(tmp_path):
    with pytest.raises(roots.NoResults, match=r"no results at .*nowhere.*does not exist.*make reproduce-table2"):
        roots.require_cells(tmp_path / "nowhere", "--results nowhere")
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    with pytest.raises(roots.NoResults, match=r"empty/runs \(--results .*\): neither it nor .* holds a cell"):
        roots.require_cells(roots.runs_folder(tmp_path / "empty"), f"--results {tmp_path / 'empty'}")


@pytest.mark.parametrize("given", ["root", "runs"])
def test_make_table_reads_either_and_writes_beside_the_runs(tmp_path, capsys, given):
    runs = tmp_path / "mine" / "runs"
    for method in ("sampling", "sps"):
        make_results.write_cell(runs, "table2", "cnndm", method)
    results = runs.parent if given == "root" else runs
    assert script("make_table")(["--results", str(results)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(
        f"reading cells under {runs} (--results {results}); writing to {tmp_path / 'mine'}/tables"
    )
    assert (tmp_path / "mine" / "tables" / "table2.md").is_file()


def test_both_scripts_name_the_override_sets_of_an_experiment_without_base_cells(tmp_path, capsys):
    runs = override_only_cells(tmp_path)
    for name, option in (("make_table", "--experiment"), ("make_figures", "--table-experiment")):
        assert script(name)(["--results", str(tmp_path), option, "mypair"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "exist with overrides pair.target_dtype=bfloat16, pair.target_dtype=float32" in err
        assert "--overrides pair.target_dtype=bfloat16" in err
    assert not (tmp_path / "tables").exists() and not (tmp_path / "figures").exists()
    argv = ["--results", str(runs), "--experiment", "mypair", "--overrides", "pair.target_dtype=float32"]
    assert script("make_figures")(argv) == 0
    assert {p.name for p in (tmp_path / "figures").iterdir()} >= {"table2_speedup.png", "table2_quality_speed.pdf"}
    assert script("make_table")([*argv, "--name", "mine"]) == 0
    rows = list(csv.DictReader((tmp_path / "tables" / "mine.csv").open()))
    assert {(r["method"], float(r["tokens_per_s"])) for r in rows} == {("sampling", 10), ("sps", 10), ("mtad", 10)}
