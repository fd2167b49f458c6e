"""The reproduction check: a rerun in a fresh process must give the reference's tokens,
perplexity, block efficiency and acceptance; any difference is reported and fails."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtad.decoding.registry import study_methods
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
    methods = len(study_methods())
    assert len(list(reference.rglob("metrics.json"))) == methods  # every study method of the registry
    rerun = tmp_path / "rerun"
    ok = verify("--reference", str(reference), "--data-root", str(wheel_data), "--keep", str(rerun), *tiny)
    assert ok.returncode == 0 and f"{methods} cell(s) reproduce" in ok.stdout, ok.stdout[-3000:] + ok.stderr[-3000:]

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
@pytest.mark.parametrize("kernels", ["native", "default"])
def test_committed_reference_reproduces(wheel_data, kernels):
    """`make verify`: the committed float64 reference cells (every method on the embedded pair)
    rerun from a fresh process with the same tokens, block efficiency and acceptance, and
    perplexity within tolerance, also on the SSE kernels another CPU type would pick."""
    proc = verify("--data-root", str(wheel_data), "--kernels", kernels)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def write_cell(root: Path, dtype: str, logprob: float, tokens: list[int]) -> Path:
    cell = root / "verify" / "pair" / "humaneval" / "sampling"
    cell.mkdir(parents=True)
    (cell / "env.json").write_text(json.dumps({"dtype": dtype, "kernels": {"target": None}}))
    (cell / "metrics.json").write_text(
        json.dumps(
            {"status": "complete", "perplexity": 2**-logprob, "mean_logprob": logprob, "new_tokens": len(tokens)}
        )
    )
    turn = {
        "token_ids": tokens,
        "text": "x",
        "completion": "x",
        "logprob_sum": logprob * len(tokens),
        "logprob_n": len(tokens),
        "stats": {"new_tokens": len(tokens), "seconds": 1.0, "target_calls": 2},
    }
    (cell / "samples.jsonl").write_text(json.dumps({"id": "e0", "samples": [{"turns": [turn], "scores": {}}]}) + "\n")
    return cell


@pytest.mark.parametrize(
    "dtype, relative_change, reproduces",
    [("float64", 1e-13, True), ("float64", 1e-7, False), ("float32", 1e-7, True), ("float32", 1e-3, False)],
)
def test_log_probabilities_compare_within_the_dtypes_tolerance(tmp_path, dtype, relative_change, reproduces):
    write_cell(tmp_path / "a", dtype, -0.5, [1, 2, 3])
    write_cell(tmp_path / "b", dtype, -0.5 * (1 + relative_change), [1, 2, 3])
    differences = compare_runs(tmp_path / "a", tmp_path / "b")
    assert (differences == []) is reproduces, differences
    assert all("beyond rtol" in d for d in differences)


def test_another_cpu_type_widens_only_the_float64_log_probability_tolerance(tmp_path):
    reference = write_cell(tmp_path / "a", "float64", -0.5, [1, 2, 3])
    for cpu, root in (("AMD EPYC", "a"), ("Intel(R) Xeon(R) Processor", "b"), ("Intel(R) Xeon(R) Processor", "c")):
        if root != "a":
            write_cell(tmp_path / root, "float64", -0.5 * (1 + 1e-6), [1, 2, 3] if root == "b" else [1, 2, 4])
        env = tmp_path / root / reference.relative_to(tmp_path / "a") / "env.json"
        env.write_text(json.dumps({"dtype": "float64", "cpu": cpu}))
    assert compare_runs(tmp_path / "a", tmp_path / "b") == []
    assert any("token_ids differs" in d for d in compare_runs(tmp_path / "a", tmp_path / "c"))
    same_cpu = json.loads((tmp_path / "b" / reference.relative_to(tmp_path / "a") / "env.json").read_text())
    (reference / "env.json").write_text(json.dumps(same_cpu))
    assert any("beyond rtol 1e-10" in d for d in compare_runs(tmp_path / "a", tmp_path / "b"))
    # one model name, other instruction sets (an AVX-512 host and an AVX2 one both read "AMD EPYC")
    (reference / "env.json").write_text(json.dumps(same_cpu | {"cpu_isa": ["avx2", "avx512f", "avx512_bf16"]}))
    rerun_env = tmp_path / "b" / reference.relative_to(tmp_path / "a") / "env.json"
    rerun_env.write_text(json.dumps(same_cpu | {"cpu_isa": ["avx2"]}))
    assert compare_runs(tmp_path / "a", tmp_path / "b") == []


def test_a_token_difference_names_where_the_tokens_diverge(tmp_path):
    write_cell(tmp_path / "a", "float64", -0.5, [1, 2, 3, 4])
    write_cell(tmp_path / "b", "float64", -0.5, [1, 2, 7, 4])
    assert any("token_ids differs from token 2" in d for d in compare_runs(tmp_path / "a", tmp_path / "b"))


def test_a_partial_cell_is_compared_on_the_examples_both_roots_hold(tmp_path):
    from mtad.report.machine_agreement import exact_summary

    full = write_cell(tmp_path / "a", "float32", -0.5, [1, 2, 3])
    partial = write_cell(tmp_path / "b", "float32", -0.5, [1, 2, 3])
    second = json.loads((full / "samples.jsonl").read_text()) | {"id": "e1"}
    with (full / "samples.jsonl").open("a") as f:
        f.write(json.dumps(second) + "\n")
    metrics = json.loads((full / "metrics.json").read_text())
    (full / "metrics.json").write_text(json.dumps(metrics | {"new_tokens": 4, "perplexity": 2.0}))
    summary = exact_summary(tmp_path / "a", tmp_path / "b")
    assert summary.startswith("1 of 1 cells") and "1 partial" in summary and "1 of 2 and 1 examples" in summary
    record = json.loads((partial / "samples.jsonl").read_text())
    record["samples"][0]["turns"][0]["token_ids"][1] = 9
    (partial / "samples.jsonl").write_text(json.dumps(record) + "\n")
    assert exact_summary(tmp_path / "a", tmp_path / "b").startswith("0 of 1 cells")


def test_every_count_of_the_reference_must_be_equal_in_the_rerun(tmp_path):
    """Draft rows and prompt tokens are compared like every count, per turn and per cell: a rerun
    that counts one the reference does not hold differs, and so does one that counts it otherwise."""
    reference = write_cell(tmp_path / "a", "float64", -0.5, [1, 2, 3])
    rerun = write_cell(tmp_path / "b", "float64", -0.5, [1, 2, 3])

    def add_counts(cell: Path, draft_rows: int) -> None:
        record = json.loads((cell / "samples.jsonl").read_text())
        record["samples"][0]["turns"][0]["stats"].update(draft_rows=draft_rows, prompt_tokens=5)
        (cell / "samples.jsonl").write_text(json.dumps(record) + "\n")
        metrics = json.loads((cell / "metrics.json").read_text())
        (cell / "metrics.json").write_text(json.dumps(metrics | {"draft_rows": draft_rows, "prompt_tokens": 5}))

    add_counts(rerun, 7)
    differences = compare_runs(tmp_path / "a", tmp_path / "b")
    assert sorted(d.split(": ")[-1] for d in differences) == [
        "draft_rows None -> 7",
        "prompt_tokens None -> 5",
        "stats.draft_rows None -> 7",
        "stats.prompt_tokens None -> 5",
    ]
    add_counts(reference, 6)
    differences = compare_runs(tmp_path / "a", tmp_path / "b")
    assert sorted(d.split(": ")[-1] for d in differences) == ["draft_rows 6 -> 7", "stats.draft_rows 6 -> 7"]
