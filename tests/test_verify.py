"""The reproduction check: a rerun in a fresh process must give the reference's tokens,
perplexity, block efficiency and acceptance; any difference is reported and fails."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtad.report.reproduce import compare_runs

REPO = Path(__file__).resolve().parents[1]
VERIFY = [sys.executable, str(REPO / "scripts" / "verify.py")]


def verify(*args, timeout=900):
    return subprocess.run([*VERIFY, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def first_cell(root: Path) -> Path:
    return sorted(p.parent for p in root.rglob("metrics.json"))[0]


@pytest.mark.slow
def test_tiny_pair_reference_reproduces_and_a_changed_token_fails(tmp_path, wheel_data):
    reference, tiny = tmp_path / "reference", ["pair=tiny_llama", "threads=1"]
    made = verify("--reference", str(reference), "--data-root", str(wheel_data), "--reference-only", *tiny)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert len(list(reference.rglob("metrics.json"))) == 6  # every method
    rerun = tmp_path / "rerun"
    ok = verify("--reference", str(reference), "--data-root", str(wheel_data), "--keep", str(rerun), *tiny)
    assert ok.returncode == 0 and "6 cell(s) reproduce exactly" in ok.stdout, ok.stdout[-3000:] + ok.stderr[-3000:]

    assert compare_runs(reference, rerun) == []
    cell = first_cell(rerun)
    record = json.loads((cell / "samples.jsonl").read_text())
    record["samples"][0]["turns"][0]["token_ids"][0] += 1
    (cell / "samples.jsonl").write_text(json.dumps(record) + "\n")
    metrics = json.loads((cell / "metrics.json").read_text())
    metrics["perplexity"] *= 1.01
    (cell / "metrics.json").write_text(json.dumps(metrics))
    differences = compare_runs(reference, rerun)
    assert any("token_ids differs" in d for d in differences) and any("perplexity" in d for d in differences)
    shutil.rmtree(cell)
    assert any("wrote no metrics.json" in d for d in compare_runs(reference, rerun))


def test_without_a_reference_verify_says_how_to_make_one(tmp_path):
    proc = verify("--reference", str(tmp_path / "none"))
    assert proc.returncode == 2 and "make verify-reference" in proc.stderr


@pytest.mark.slow
def test_committed_reference_reproduces(wheel_data):
    """`make verify`: the committed reference cells (every method on the embedded pair) rerun
    from a fresh process with the same tokens, perplexity, block efficiency and acceptance."""
    proc = verify("--data-root", str(wheel_data))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
