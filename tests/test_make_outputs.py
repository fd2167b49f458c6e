"""RESULTS moves every output of a make target: tables, claims and figures go into the parent of the runs
folder named, while the defaults (results/local) and the reference (`make results`) stay where they were."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry_run(*args) -> str:
    proc = subprocess.run(["make", "-n", *args, "PY=python"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize(
    "results, root",
    [("/tmp/mine/runs", "/tmp/mine"), ("/tmp/mine/runs/", "/tmp/mine"), ("results/local/runs", "results/local")],
)
def test_tables_claims_and_figures_go_beside_the_runs_named(results, root):
    table = dry_run("reproduce-table2", f"RESULTS={results}")
    assert f"results_root={results}" in table and f"--out {root}/tables" in table
    assert f"--out {root}/claims" in dry_run("claims", f"RESULTS={results}")
    assert f"make_figures.py --results {results} --out {root}/figures" in dry_run("figures", f"RESULTS={results}")


def test_the_defaults_and_the_reference_keep_their_folders():
    assert "--out results/local/tables" in dry_run("reproduce-table2")
    assert "--out results/tables" in dry_run("reproduce-table2", "RESULTS=results/runs")
    # `make figures` alone redraws the committed figures from the committed cells, as `make results` does
    assert "make_figures.py --results results/runs --out results/figures" in dry_run("figures")
    assert "make_figures.py --results results/runs --out results/figures" in dry_run("figures", "RESULTS=results/runs")
