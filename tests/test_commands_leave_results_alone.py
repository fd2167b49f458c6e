"""The documented commands that read results (reports, tables, figures, the agreement check) and a
plain `mtad-run` leave a clone's committed files untouched: their defaults write under
results/local/, and the targets that regenerate committed files (`make table`, `make figures`)
rewrite nothing whose content is unchanged."""

import subprocess
import sys

import pytest
from test_fresh_clone import fresh_clone

READING_COMMANDS = [
    ["make", "help"],
    ["make", "table"],
    ["make", "figures"],
    # the committed run read: the report goes under results/local (its bootstrap's last digits vary by CPU type)
    ["make", "claims", "OVERRIDES=--report-only", "RESULTS=results/runs"],
    ["{python}", "scripts/make_table.py", "--experiment", "table2"],
    ["{python}", "scripts/make_figures.py"],
    ["{python}", "-m", "mtad.experiments.claims", "--report-only", "results_root=results/runs"],
    [
        "{python}",
        "-m",
        "mtad.report.machine_agreement",
        "claims",
        "results/claims/claims.json",
        "results/claims/claims.json",
    ],
    ["{python}", "-m", "mtad.run", "pair=tiny_llama", "logger=none", "method=sampling", "task=chat", "limit=1"],
]


@pytest.mark.slow
def test_reading_commands_and_a_plain_run_leave_git_status_clean(tmp_path):
    clone, env = fresh_clone(tmp_path)
    python = str(clone / ".venv" / "bin" / "python")
    for command in READING_COMMANDS:
        argv = [python if part == "{python}" else part for part in command]
        if argv[0] == "make":
            argv.append(f"PY={python}")
        proc = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (command, (proc.stdout + proc.stderr)[-3000:])
        status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
        assert status.strip() == "", (command, status)
    assert (clone / "results" / "local" / "claims" / "claims.md").is_file()
    assert (clone / "results" / "local" / "tables" / "table2.md").is_file()
    assert list((clone / "results" / "local" / "runs" / "default").rglob("metrics.json"))


def dry_run_lines(target: str, extra: list[str]) -> list[str]:
    """The commands `make -n <target>` prints in this checkout, with this interpreter as PY."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    argv = ["make", "--no-print-directory", "-n", target, f"PY={sys.executable}", *extra]
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True).stdout.splitlines()


@pytest.mark.parametrize(
    "extra, out",
    [
        (["OVERRIDES=--report-only", "RESULTS=results/runs"], "results/local/claims"),
        (
            ["OVERRIDES=--report-only --no-theory", "RESULTS=results/runs", "CLAIMS_OUT=results/claims"],
            "results/local/claims",
        ),
        (["OVERRIDES=--report-only", "RESULTS=results/runs", "CLAIMS_OUT=/tmp/mine"], "/tmp/mine"),
        (["OVERRIDES=--report-only", "RESULTS=results/runs", "REGENERATE=1"], "results/claims"),  # `make results`
        (["RESULTS=results/runs", "REGENERATE=1"], "results/claims"),
    ],
)
def test_a_report_only_claims_writes_the_committed_report_only_within_make_results(extra, out):
    lines = dry_run_lines("claims", extra)
    (command,) = [line for line in lines if "-m mtad.experiments.claims" in line]
    assert f" --out {out} " in command, command
    compared = [line for line in lines if "mtad.report.machine_agreement claims" in line]
    assert bool(compared) == (out != "results/claims")  # a report written aside is compared with the committed one


@pytest.mark.parametrize(
    "extra, cells, out",
    [
        ([], "results/local/runs", "results/local/draft"),
        (["RESULTS=results/runs"], "results/runs", "results/local/draft"),  # the committed cells read: report aside
        (["RESULTS=/tmp/mine/runs"], "/tmp/mine/runs", "/tmp/mine/draft"),
        (["RESULTS=results/runs", "REGENERATE=1"], "results/runs", "results/draft"),  # `make results`
    ],
)
def test_the_draft_measurement_writes_the_committed_report_only_within_make_results(extra, cells, out):
    lines = dry_run_lines("measure-draft", extra)
    (command,) = [line for line in lines if "-m mtad.experiments.drafts" in line]
    assert f" results_root={cells} " in command and f" --out {out} " in command, command
    rendered = [line for line in lines if "scripts/results_readme.py" in line]
    assert bool(rendered) == (out == "results/draft")  # the results page quotes only the committed measurement


def test_a_rebuild_that_only_changes_its_build_time_leaves_the_file_alone(tmp_path):
    from mtad.records import write_if_changed

    path = tmp_path / "table.md"
    assert write_if_changed(path, "# T\n- built: 2026-01-01T00:00:00+00:00 from x\n| a |\n")
    stamp = path.stat().st_mtime_ns
    assert not write_if_changed(path, "# T\n- built: 2026-12-01T10:00:00+00:00 from x\n| a |\n")
    assert path.stat().st_mtime_ns == stamp and "2026-01-01" in path.read_text()
    assert write_if_changed(path, "# T\n- built: 2026-12-01T10:00:00+00:00 from x\n| b |\n")
    assert "| b |" in path.read_text()


# the targets that run or regenerate (minutes to hours) are checked from what make would run
REGENERATING = {"results", "verify-reference", "draft"}  # they write committed files by design


def test_no_make_target_but_results_deletes_a_committed_run():
    """Every target of `make help`, dry-run as a user would call it, and with the committed root as
    RESULTS: none removes files (only `make results` regenerates a committed run from scratch)."""
    import re
    from pathlib import Path

    from mtad.provenance import code_state, read_stamp
    from mtad.regeneration import is_done

    repo = Path(__file__).resolve().parents[1]
    make = ["make", "--no-print-directory"]  # inside a parent make (the fresh clone's test-fast) too
    listed = subprocess.run([*make, "help"], cwd=repo, capture_output=True, text=True, check=True).stdout
    targets = [m.group(1) for m in re.finditer(r"^  ([a-zA-Z0-9_-]+) ", listed, re.M)]
    assert {"claims", "table", "figures", "sweeps", "reproduce-table2"} <= set(targets)
    for target in targets:
        if target in REGENERATING or target in ("install", "test", "test-fast", "lint"):
            continue
        for extra in ([], ["RESULTS=results/runs"], ["RESULTS=results/runs", "OVERRIDES=--report-only"]):
            dry = subprocess.run(
                [*make, "-n", target, *extra, f"PY={sys.executable}"], cwd=repo, capture_output=True, text=True
            )
            assert dry.returncode == 0 and dry.stdout.strip(), (target, extra, dry.stderr)
            removes = [line for line in dry.stdout.splitlines() if re.search(r"\brm -(r|f|rf)\b", line)]
            assert removes == [], (target, extra, removes)
    stamps = sorted((repo / "results" / ".stamps").glob("*"))
    before = {p: p.read_text() for p in stamps}
    # the loop runs in a checkout with uncommitted changes as well, and RESTART=1 discards nothing dry
    dirty_too = ["ALLOW_DIRTY=1", "RESTART=1"]
    dry = subprocess.run(
        [*make, "-n", "results", f"PY={sys.executable}", *dirty_too], cwd=repo, capture_output=True, text=True
    )
    after = sorted((repo / "results" / ".stamps").glob("*"))
    assert after == stamps and {p: p.read_text() for p in after} == before  # a dry run marks no step done
    # each step either is stamped at this code state and the regeneration's pin already or would be stamped now
    steps = re.search(r"^RESULT_STEPS \?= (.+)$", (repo / "Makefile").read_text(), re.M).group(1).split()
    code, record = code_state(repo), read_stamp(repo / "results", "regeneration") or {}
    for step in steps:
        done = record.get("code") == code and is_done(read_stamp(repo / "results", step), code, record["target_dtype"])
        expected = f"results: {step} already done at code {code}" if done else f"results: would stamp {step}"
        assert expected in dry.stdout, (step, dry.stdout[-2000:])
    assert "REGENERATE=1" in dry.stdout  # the one target that may
