"""No user command touches the committed results: runs of committed experiments write under
results/local and compare with the reference; only `make results` writes the reference."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry_run(*args) -> str:
    proc = subprocess.run(
        ["make", "-n", *args, f"PY={sys.executable}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("target", ["reproduce-table2", "smoke", "sweeps", "claims"])
def test_user_runs_write_under_results_local_and_never_remove_the_reference(target):
    out = dry_run(target)
    assert "results_root=results/local/runs" in out and "rm -rf" not in out
    if target in ("reproduce-table2", "smoke"):
        assert (
            "--out results/local/tables" in out
            and "mtad.report.machine_agreement cells results/runs results/local/runs" in out
        )
    if target == "claims":
        assert "--out results/local/claims" in out and "agreement claims results/claims/claims.json" in out


def test_only_make_results_writes_the_reference():
    makefile = (REPO / "Makefile").read_text()  # (a dry run of `results` would still run its sub-makes)
    assert "REFERENCE := results/runs" in makefile and '--step-args "RESULTS=$(REFERENCE) REGENERATE=1"' in makefile
    reference = dry_run("reproduce-table2", "RESULTS=results/runs")
    assert "results_root=results/runs" in reference and "--out results/tables" in reference
    assert "agreement" not in reference


def test_the_code_state_ignores_committed_results_and_follows_the_code(tmp_path):
    """`make results` stamps each step with it: a step's outputs committed between sittings (results,
    the drafts' model cards it renders) leave the code the later steps run the same, a change anywhere
    else does not; uncommitted outputs do not stop a later sitting, uncommitted code does."""
    (tmp_path / "Makefile").write_text((REPO / "Makefile").read_text())
    (tmp_path / "results").mkdir()
    cards = tmp_path / "mtad" / "assets" / "drafts"
    cards.mkdir(parents=True)
    (tmp_path / "engine.py").write_text("x = 1\n")
    (tmp_path / "results" / "table.md").write_text("old\n")
    (cards / "head.md").write_text("## Measured\nold\n")
    (cards / "head.safetensors").write_text("weights\n")

    def commit() -> str:
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
        subprocess.run([*git, "add", "-A"], check=True, capture_output=True)
        subprocess.run([*git, "commit", "-q", "-m", "c"], check=True, capture_output=True)
        make = ["make", "-s", "--no-print-directory", "code-state", f"PY={sys.executable}"]  # a sub-make too
        state = subprocess.run(make, cwd=tmp_path, env=outside_make, capture_output=True, text=True, check=True)
        return state.stdout.strip()

    def uncommitted_code() -> list[str]:
        make = ["make", "-s", "--no-print-directory", "uncommitted-code", f"PY={sys.executable}"]
        listed = subprocess.run(make, cwd=tmp_path, env=outside_make, capture_output=True, text=True, check=True)
        return listed.stdout.split()

    outside_make = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    first = commit()
    (tmp_path / "results" / "table.md").write_text("regenerated\n")
    (tmp_path / "results" / "new.json").write_text("{}\n")
    (cards / "head.md").write_text("## Measured\nregenerated\n")
    assert uncommitted_code() == []
    assert commit() == first and len(first) == 40
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x(): pass\n")  # no step runs a test
    assert uncommitted_code() == []
    assert commit() == first
    (cards / "head.safetensors").write_text("retrained\n")
    assert uncommitted_code() == ["mtad/assets/drafts/head.safetensors"]
    second = commit()
    assert second != first
    (tmp_path / "engine.py").write_text("x = 2\n")
    assert uncommitted_code() == ["engine.py"]
    assert commit() not in (first, second)


def test_local_results_are_ignored_by_git():
    probe = subprocess.run(["git", "check-ignore", "results/local/runs/table2/x"], cwd=REPO, capture_output=True)
    assert probe.returncode == 0


def test_make_table_names_the_experiments_there_and_hints_at_override_folders(tmp_path):
    from mtad.report.tables import build_table2

    cell = tmp_path / "sweeps" / "pair" / "cnndm" / "mtad" / "method.gamma=3"
    cell.mkdir(parents=True)
    (cell / "metrics.json").write_text('{"status": "complete"}')
    with pytest.raises(ValueError, match=r"no cells of experiment 'nonexistent' .*experiments there: \['sweeps'\]"):
        build_table2(tmp_path, tmp_path / "out", experiment="nonexistent")
    with pytest.raises(ValueError, match="method.gamma=3.*--overrides any"):
        build_table2(tmp_path, tmp_path / "out", experiment="sweeps")


def test_make_results_restarts_a_committed_run_and_resumes_a_regenerated_one(tmp_path):
    """REGENERATE=1 removes a reference folder that is exactly its committed state (its cells' ignored
    lock files aside, which every run leaves), and keeps one holding cells written since."""
    makefile = (REPO / "Makefile").read_text() + "\nprobe:\n\t$(call fresh_if_committed,results/runs/table2)\n"
    (tmp_path / "Makefile").write_text(makefile)
    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text())
    cell = tmp_path / "results" / "runs" / "table2" / "pair" / "chat" / "sps"
    cell.mkdir(parents=True)
    (cell / "samples.jsonl").write_text("{}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    outside_make = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def probe() -> bool:
        subprocess.run(["make", "-s", "probe", "REGENERATE=1"], cwd=tmp_path, env=outside_make, check=True)
        return cell.exists()

    (cell / ".cell.lock").write_text("")  # a finished run's lock file: the folder is still the committed one
    (cell / "samples.jsonl").write_text("{}\n{}\n")  # a regeneration under way
    assert probe()
    subprocess.run([*git, "checkout", "--", "results"], check=True)
    assert not probe()
