"""`make results` (mtad/regeneration.py) in a scratch checkout whose steps only write a line: each
step stamped with the code state, commit, machine and pinned dtype it ran; a regeneration resumed on
another machine under the dtype it pinned; a group of steps that read each other's timings kept on
one machine; one code state and one pin per regeneration, RESTART=1 beginning again."""

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from mtad.models import dtype_choice
from mtad.provenance import code_state, read_stamp
from mtad.regeneration import GROUPS, Refused, Request, regenerate
from tests.test_dtype_choice import fake_costs

REPO = Path(__file__).resolve().parents[1]
# every step appends its name and the pinned dtype it saw to results/ran; FAIL_AT=<step> fails that one
STEPS = (
    '\nstep-a step-b profiles bench:\n\techo "$@ $$MTAD_TARGET_DTYPE" >> results/ran; echo $@ >> results/table.md\n'
    "\t$(if $(FAIL_AT),test $@ != $(FAIL_AT))\n"
    "results-readme:\n\t@true\n"  # (the page's renderer is not in this folder)
)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args], check=True)


def commit_all(root: Path) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for variable in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MTAD_TARGET_DTYPE"):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "Makefile").write_text(STEPS)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.md").write_text("committed\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commit_all(tmp_path)
    return tmp_path


def on(root: Path, machine: str, *steps: str, fail_at: str | None = None, **settings) -> None:
    """`make results` on `machine`, the steps of tiny_llama's regeneration `steps` (default: step-a step-b)."""
    step_args = [f"FAIL_AT={fail_at}"] if fail_at else []
    steps = list(steps or ("step-a", "step-b"))
    regenerate(Request(root=root, steps=steps, pair="tiny_llama", step_args=step_args, machine=machine, **settings))


def ran(root: Path) -> list[str]:
    return (root / "results" / "ran").read_text().splitlines()


def stamp(root: Path, name: str) -> dict | None:
    return read_stamp(root / "results", name)


def head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_each_step_names_where_it_ran_and_another_machine_goes_on_in_the_pinned_dtype(repo, capfd):
    with pytest.raises(Refused, match="step-b failed"):
        on(repo, "A", fail_at="step-b", target_dtype="float32")
    first = stamp(repo, "step-a")
    assert (first["step"], first["code"], first["commit"]) == ("step-a", code_state(repo), head(repo))
    assert (first["machine"], first["target_dtype"], first["dirty"]) == ("A", "float32", False)
    assert first["kernels"] and datetime.fromisoformat(first["finished"]) and stamp(repo, "step-b") is None
    record = stamp(repo, "regeneration")
    assert (record["code"], record["machine"], record["target_dtype"], record["pinned_by"]) == (
        code_state(repo),
        "A",
        "float32",
        "TARGET_DTYPE",
    )
    on(repo, "B")  # another sitting, another machine, no dtype named: the regeneration's pin
    assert ran(repo) == ["step-a float32", "step-b float32", "step-b float32"]
    assert stamp(repo, "step-a")["machine"] == "A" and stamp(repo, "step-b")["machine"] == "B"
    assert "step-a already done at code" in capfd.readouterr().out
    on(repo, "C")  # nothing left: the finished regeneration stands wherever it is read
    assert len(ran(repo)) == 3 and "every step done" in capfd.readouterr().out


def test_steps_that_read_each_others_timings_run_on_one_machine(repo, capfd):
    assert ("profiles", "bench") in GROUPS
    with pytest.raises(Refused, match="bench failed"):
        on(repo, "A", "profiles", "bench", fail_at="bench", target_dtype="float32")
    on(repo, "A", "profiles", "bench")  # the same machine: the profiles stand
    assert [line.split()[0] for line in ran(repo)] == ["profiles", "bench", "bench"]
    assert "redone" not in capfd.readouterr().out
    bench = stamp(repo, "bench") | {"machine": "C"}  # a bench measured elsewhere than its profiles
    (repo / "results" / ".stamps" / "bench").write_text(json.dumps(bench))
    on(repo, "A", "profiles", "bench")  # the profiles were measured here: only the bench again
    assert [line.split()[0] for line in ran(repo)] == ["profiles", "bench", "bench", "bench"]
    assert "bench stamped on C; redone here" in capfd.readouterr().out

    with pytest.raises(Refused, match="bench failed"):  # a new regeneration: profiles on A, the bench fails
        on(repo, "A", "profiles", "bench", fail_at="bench", target_dtype="bfloat16", restart=True)
    on(repo, "B", "profiles", "bench")
    out = capfd.readouterr().out
    assert "profiles -> bench run in one sitting on one machine" in out and "profiles stamped on A; redone" in out
    assert ran(repo) == ["profiles bfloat16", "bench bfloat16", "profiles bfloat16", "bench bfloat16"]
    assert stamp(repo, "profiles")["machine"] == stamp(repo, "bench")["machine"] == "B"


def test_a_regeneration_under_way_goes_on_only_at_its_code_state_and_pin(repo, capfd):
    with pytest.raises(Refused, match="step-b failed"):
        on(repo, "A", fail_at="step-b", target_dtype="float32")
    with pytest.raises(Refused, match="TARGET_DTYPE=bfloat16 would mix dtypes"):
        on(repo, "A", target_dtype="bfloat16")
    with pytest.raises(ValueError, match="^TARGET_DTYPE='fp8' is not a target dtype; valid: float32, .*bfloat16"):
        on(repo, "A", target_dtype="fp8")
    (repo / "code.py").write_text("x = 1\n")
    with pytest.raises(Refused, match="uncommitted changes; commit them first"):
        on(repo, "A")
    git(repo, "add", "code.py")
    git(repo, "commit", "-q", "-m", "code")  # new code, the regeneration's results still uncommitted
    with pytest.raises(Refused, match="one code state"):
        on(repo, "A")
    assert ran(repo) == ["step-a float32", "step-b float32"]
    on(repo, "B", restart=True, target_dtype="bfloat16")
    assert "discarding" in capfd.readouterr().out
    assert ran(repo) == ["step-a bfloat16", "step-b bfloat16"]
    assert (repo / "results" / "table.md").read_text().split() == ["committed", "step-a", "step-b"]
    assert {stamp(repo, s)["target_dtype"] for s in ("step-a", "step-b", "regeneration")} == {"bfloat16"}


def test_a_regeneration_pins_what_auto_means_here_unless_a_dtype_is_named(repo, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("MTAD_KERNELS", raising=False)
    calls = []
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs("bfloat16", calls))
    on(repo, "A", "step-a")  # never measured on this machine: measured as the regeneration begins
    assert ran(repo) == ["step-a bfloat16"] and len(calls) == 1
    assert stamp(repo, "regeneration")["pinned_by"] == "`auto` of tiny_llama on A (measured)"
    for pin, why in ((None, "(stored)"), ("float64", "(pinned)")):
        (repo / "code.py").write_text(f"x = {pin!r}\n")  # new code, the finished results committed
        commit_all(repo)
        if pin:
            monkeypatch.setenv("MTAD_TARGET_DTYPE", pin)
        on(repo, "A", "step-a")
        assert stamp(repo, "regeneration")["pinned_by"] == f"`auto` of tiny_llama on A {why}"
    assert ran(repo) == ["step-a bfloat16", "step-a bfloat16", "step-a float64"] and len(calls) == 1


def test_the_steps_still_to_do_named_alone_go_on_with_the_regeneration_under_way(repo, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path_factory.mktemp("cache")))
    calls = []
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs("bfloat16", calls))
    on(repo, "A", "step-a", target_dtype="float32")
    began = stamp(repo, "regeneration")
    commit_all(repo)  # a sitting's results committed: nothing uncommitted tells of the regeneration
    on(repo, "B", "step-b")  # RESULT_STEPS naming the step still to do alone, on another machine
    assert ran(repo) == ["step-a float32", "step-b float32"] and calls == []  # its pin, not auto's here
    assert stamp(repo, "regeneration") == began
    with pytest.raises(Refused, match="would mix dtypes"):
        on(repo, "B", "step-b", target_dtype="bfloat16")


def test_make_results_runs_the_regeneration_and_make_n_stamps_nothing(repo):
    (repo / "Makefile").write_text((REPO / "Makefile").read_text() + STEPS)
    (repo / "pyproject.toml").write_text("")
    (repo / ".gitignore").write_text((REPO / ".gitignore").read_text())
    commit_all(repo)
    (repo / ".venv").mkdir()
    (repo / ".venv" / ".installed").write_text("")  # newer than pyproject.toml: `install` is done
    outside_make = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def make(*args: str) -> subprocess.CompletedProcess:
        command = ["make", *args, "results", f"PY={sys.executable}", "RESULT_STEPS=step-a step-b", "STAMP_MACHINE=A"]
        return subprocess.run(command, cwd=repo, env=outside_make, capture_output=True, text=True)

    dry = make("-n", "TARGET_DTYPE=float32")
    assert (
        dry.returncode == 0 and "would stamp step-b" in dry.stdout and 'echo "step-a $MTAD_TARGET_DTYPE"' in dry.stdout
    )
    assert not (repo / "results" / ".stamps").exists() and not (repo / "results" / "ran").exists()
    dry = make("DRY_RUN=1", "TARGET_DTYPE=float32")  # the Makefile's switch: no -n in MAKEFLAGS
    assert dry.returncode == 0 and "would stamp step-b" in dry.stdout and "dry run: no step was run" in dry.stdout
    assert not (repo / "results" / ".stamps").exists() and not (repo / "results" / "ran").exists()
    assert make("-s", "TARGET_DTYPE=float32").returncode == 0 and ran(repo) == ["step-a float32", "step-b float32"]
    assert stamp(repo, "step-b")["machine"] == "A"
    refused = make("-s", "TARGET_DTYPE=fp8")
    assert refused.returncode != 0 and "TARGET_DTYPE='fp8' is not a target dtype; valid: float32" in refused.stdout
