"""Ctrl-C during a run: one line naming the examples kept, exit status 130, and the same command
resumes without generating a recorded example again (mtad-run's multirun and the claims command)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_run import REPO
from test_run_failures import valid_record

from mtad.records import read_records

# each example takes a little longer, so that Ctrl-C lands while the cells still have work to do
SLOWED = """
import time
import mtad.runner.session as session
_run = session.PairSession.run
def run(self, key, example):
    _run(self, key, example)
    time.sleep(0.4)
session.PairSession.run = run
"""
ENTRIES = {
    "mtad-run": "from mtad.run import main; main()",
    "claims": "import sys; from mtad.experiments.claims import main; sys.exit(main())",
}
MTAD_RUN = ["-m", "pair=tiny_llama", "logger=none", "task=chat", "method=sampling,sps", "limit=3", "progress=false"]
CLAIMS = ["experiment=claims_tiny", "--no-theory"]


def start(entry: str, args: list[str], tmp_path: Path, slowed: bool) -> subprocess.Popen:
    """The entry point in a fresh process with test paths, writing cells under ``tmp_path/runs``."""
    paths = [f"results_root={tmp_path / 'runs'}"]
    paths += ["--out", str(tmp_path / "claims")] if entry == "claims" else [f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    code = (SLOWED if slowed else "") + "\n" + ENTRIES[entry]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, "warmup_tokens=2", *paths],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job (a test run started with `&`) ignores SIGINT, and so would the child:
        # it gets the disposition of a command started at a terminal, where Ctrl-C is pressed
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def recorded(root: Path) -> dict[Path, list[bytes]]:
    """Each cell's samples.jsonl lines."""
    return {p: p.read_bytes().splitlines(keepends=True) for p in sorted(root.rglob("samples.jsonl"))}


def interrupt_once_recorded(proc: subprocess.Popen, root: Path, timeout_s: float = 120) -> tuple[int, str]:
    """SIGINT to ``proc`` as soon as one example is recorded under ``root``; (exit status, stderr)."""
    deadline = time.monotonic() + timeout_s
    while not any(recorded(root).values()):
        assert proc.poll() is None, f"ended before recording anything:\n{proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "no example recorded in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def check_interrupted_then_resumed(entry: str, args: list[str], tmp_path: Path) -> tuple[str, str]:
    """Interrupt the entry, check its line and the kept records, rerun it to the end; (its line,
    everything it wrote to stderr)."""
    runs = tmp_path / "runs"
    status, stderr = interrupt_once_recorded(start(entry, args, tmp_path, slowed=True), runs)
    assert status == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    kept = recorded(runs)
    examples = sum(len({r["id"] for r in read_records(p)}) for p in kept)
    cells = sum(1 for lines in kept.values() if lines)
    assert examples >= 1 and line.startswith(f"{entry}: interrupted; {examples} example")
    assert f"kept in {cells} cell" in line and line.endswith("rerun the same command to resume")
    resumed = start(entry, args, tmp_path, slowed=False)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, (out + err)[-3000:]
    for path, lines in kept.items():  # the interrupted run's records stand, none generated again
        after = path.read_bytes().splitlines(keepends=True)
        assert after[: len(lines)] == lines
        ids = [r["id"] for r in read_records(path)]
        assert len(ids) == len(set(ids)) and len(after) == len(ids)
    return line, stderr


def test_ctrl_c_in_a_multirun_is_one_line_and_the_same_command_resumes(tmp_path):
    line, stderr = check_interrupted_then_resumed("mtad-run", MTAD_RUN, tmp_path)
    assert stderr.strip() == line  # Hydra logs the cells to stdout: the line is all stderr holds
    assert f"({tmp_path / 'runs'}/default/tiny_llama/chat" in line
    complete = {p.parent.name: len(read_records(p)) for p in (tmp_path / "runs").rglob("samples.jsonl")}
    assert complete == {"sampling": 3, "sps": 3}


@pytest.mark.slow
def test_ctrl_c_in_the_claims_command_is_one_line_and_the_same_command_resumes(tmp_path):
    line, _ = check_interrupted_then_resumed("claims", CLAIMS, tmp_path)
    assert f"({tmp_path / 'runs'}/claims_tiny/tiny_llama)" in line


def test_the_line_counts_the_records_of_the_cells_begun(tmp_path):
    from mtad.runner.interrupt import interrupted_line

    cells = [tmp_path / "exp" / "pair" / "chat" / m for m in ("sampling", "sps", "mtad")]
    for cell, ids in zip(cells, (["a", "b"], ["a"], [])):
        cell.mkdir(parents=True)
        (cell / "samples.jsonl").write_text("".join(valid_record(i) for i in ids) + '{"id": "c", "torn')
    line = interrupted_line("mtad-run", cells)
    assert line == (
        f"mtad-run: interrupted; 3 examples kept in 2 cells ({tmp_path / 'exp' / 'pair' / 'chat'}); "
        "rerun the same command to resume"
    )
    assert "before this process began a cell" in interrupted_line("mtad-run", [])


@pytest.mark.parametrize("target", ["reproduce-table2", "smoke"])
def test_ctrl_c_ends_the_main_command_at_the_runs_own_line(tmp_path, target):
    """Under make, a run stopped by Ctrl-C (status 130) builds no table and compares nothing: its
    line naming what was kept is the last the command prints before make's own."""
    fake_python = tmp_path / "python"  # get_data.py, make_table.py and the agreement: each only says it ran
    fake_python.write_text('#!/bin/sh\necho "ran $*"\n')
    fake_python.chmod(0o755)
    run = "sh -c 'echo \"mtad-run: interrupted; 3 examples kept\" >&2; exit 130' --"
    proc = subprocess.run(
        ["make", "--no-print-directory", "-s", target, f"PY={fake_python}", f"RUN={run}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "scripts/get_data.py" in proc.stdout  # the data step ran before the run
    assert "make_table.py" not in proc.stdout and "agreement" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert errors == ["mtad-run: interrupted; 3 examples kept"]
