"""Provenance that cannot lie: the code state is read once per process, dirty trees are
recognised by a hash of their diff, and tables refuse cells of mixed or dirty code states."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from mtad import provenance as prov
from mtad.report.cells import load_cells
from mtad.report.tables import ProvenanceError, build_table2, provenance

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)


def git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    (root / "mtad").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "mtad" / "code.py").write_text("x = 1\n")
    (root / "results" / "cell.json").write_text("{}\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "one")
    monkeypatch.setattr(prov, "REPO_ROOT", root)
    return root


def test_clean_dirty_and_diff_hash(repo):
    clean = prov.read_git_state()
    assert len(clean["commit"]) == 40 and clean["dirty"] is False and clean["diff_sha256"] is None
    (repo / "results" / "cell.json").write_text('{"new": 1}\n')  # results are outputs, not code
    (repo / "results" / "new_cell.json").write_text("{}\n")
    (repo / "tests").mkdir()  # nor is what no step runs, nor a card a step renders
    (repo / "tests" / "test_new.py").write_text("def test(): pass\n")
    (repo / "mtad" / "assets" / "drafts").mkdir(parents=True)
    (repo / "mtad" / "assets" / "drafts" / "head.md").write_text("## Measured\n")
    (repo / "README.md").write_text("# the documentation, which no step reads\n")
    (repo / "mtad" / "README.md").write_text("# a package's\n")
    assert prov.read_git_state() == clean
    assert prov.uncommitted_code(repo) == []
    (repo / "mtad" / "assets" / "drafts" / "head.safetensors").write_text("weights\n")
    assert prov.read_git_state()["dirty"] is True and prov.uncommitted_code(repo) == [
        "mtad/assets/drafts/head.safetensors"
    ]
    (repo / "mtad" / "assets" / "drafts" / "head.safetensors").unlink()
    (repo / "mtad" / "code.py").write_text("x = 2\n")
    one = prov.read_git_state()
    assert one["commit"] == clean["commit"] and one["dirty"] is True and len(one["diff_sha256"]) == 64
    (repo / "mtad" / "code.py").write_text("x = 3\n")
    assert prov.read_git_state()["diff_sha256"] != one["diff_sha256"]  # another change, another hash
    (repo / "mtad" / "code.py").write_text("x = 1\n")
    (repo / "mtad" / "new_module.py").write_text("y = 1\n")  # untracked code counts too
    assert prov.read_git_state()["dirty"] is True
    assert prov.provenance_key(one) == f"{one['commit']}+dirty:{one['diff_sha256'][:12]}"
    assert prov.provenance_key(clean) == clean["commit"] and prov.provenance_key({}) == "unknown"


def test_the_code_state_is_read_once_per_process(monkeypatch):
    state = prov.capture()
    monkeypatch.setattr(prov, "read_git_state", lambda: pytest.fail("the code state was read again"))
    assert prov.environment_record()["git"] == state == prov.git_commit()


def test_outside_git_the_state_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(prov, "REPO_ROOT", tmp_path)
    assert prov.read_git_state() == {"commit": None, "dirty": None, "diff_sha256": None}


def set_git(cell: Path, *states):
    env = json.loads((cell / "env.json").read_text())
    env["git"], env["git_runs"] = states[-1], list(states)
    (cell / "env.json").write_text(json.dumps(env))


A = {"commit": "a" * 40, "dirty": False, "diff_sha256": None}
B = {"commit": "b" * 40, "dirty": False, "diff_sha256": None}
DIRTY = {"commit": "a" * 40, "dirty": True, "diff_sha256": "c" * 64}


def two_cells(root: Path, first: dict, second: dict | tuple) -> None:
    set_git(make_results.write_cell(root, "table2", "cnndm", "sampling"), first)
    set_git(
        make_results.write_cell(root, "table2", "cnndm", "sps"), *(second if isinstance(second, tuple) else (second,))
    )


def test_one_clean_commit_is_named_in_the_header(tmp_path):
    two_cells(tmp_path / "runs", A, A)
    md, _ = build_table2(tmp_path / "runs", tmp_path / "tables")
    assert f"- code: commit {'a' * 40} (clean tree)" in md.read_text()


@pytest.mark.parametrize(
    "second, named", [(B, "b" * 40), (DIRTY, "+dirty:cccccccccccc"), ((B, A), "b" * 40), ({}, "unknown")]
)
def test_mixed_or_dirty_cells_are_refused_unless_allowed(tmp_path, second, named):
    two_cells(tmp_path / "runs", A, second)
    with pytest.raises(ProvenanceError, match="--allow-mixed-provenance") as err:
        build_table2(tmp_path / "runs", tmp_path / "tables")
    assert named in str(err.value) and not (tmp_path / "tables").exists()
    md, _ = build_table2(tmp_path / "runs", tmp_path / "tables", allow_mixed_provenance=True)
    assert "- code: MIXED code states" in md.read_text() and named in md.read_text()


@pytest.mark.slow
def test_make_table_refuses_and_accepts_the_flag(tmp_path):
    two_cells(tmp_path / "runs", A, B)
    command = [
        "python",
        str(REPO / "scripts" / "make_table.py"),
        "--results",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "tables"),
    ]
    import sys

    command[0] = sys.executable
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode == 1 and "do not come from one commit" in refused.stderr
    built = subprocess.run(command + ["--allow-mixed-provenance"], capture_output=True, text=True)
    assert built.returncode == 0 and "MIXED" in (tmp_path / "tables" / "table2.md").read_text()


def test_missing_cells_carry_no_code_state(tmp_path):
    root = tmp_path / "runs"
    set_git(make_results.write_cell(root, "table2", "cnndm", "sampling"), A)
    missing = root / "table2" / make_results.PAIR / "spider" / "sampling"
    missing.mkdir(parents=True)
    (missing / "metrics.json").write_text(
        json.dumps(
            {
                "status": "missing",
                "missing_reason": "spider data not found: looked for X. Get it with `python scripts/get_data.py`",
            }
        )
    )
    cells = load_cells(root)
    assert provenance(cells) == f"commit {'a' * 40} (clean tree)"
    md, _ = build_table2(root, tmp_path / "tables")
    text = md.read_text()
    assert "| spider | sampling | missing |" in text and "data missing" in text and "get_data.py" in text


RECORDING_COMMANDS = tuple(
    f"scripts/{name}.py" for name in ("bench", "profile_blocks", "distill_draft", "gpu_check")
) + ("mtad/experiments/drafts.py", "mtad/experiments/claims.py")


@pytest.mark.parametrize("name", RECORDING_COMMANDS)
def test_every_script_that_writes_a_record_reads_the_code_state_before_it_runs(name):
    """A record names the code that ran, not the checkout at the moment it was written: a bench
    that runs for an hour while commits land must still name the commit it started from."""
    source = (Path(__file__).resolve().parents[1] / name).read_text()
    main = source[source.index("def main(") :]
    parsed = main.index(".parse_")
    captured = main.find("capture()", parsed)
    assert captured > parsed, f"{name} records the code state only when it first writes a record"
    work = [main.find(call, parsed) for call in ("measure_pair(", "load_pair(", "run_checks(", "measure(")]
    assert all(at < 0 or captured < at for at in work)
