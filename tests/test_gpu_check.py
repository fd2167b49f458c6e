"""`make gpu-check` (scripts/gpu_check.py over mtad/bench/gpu_check/): without CUDA a dry run that
names every check as skipped with the reason and exits 0, with or without torch; with --device cpu
the checks themselves run on tiny models; one check's error is its result and the others still run."""

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from mtad.bench import gpu_check
from mtad.models.check_cases import FLOAT64_PAIRS, dist_cases

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.py"
NO_CUDA_REASON = "no CUDA device: torch.cuda.is_available() is False"


def script_main():
    spec = importlib.util.spec_from_file_location("gpu_check_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def report(out: Path) -> tuple[dict, str]:
    return json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


def by_name(payload: dict) -> dict:
    return {c["name"]: c for c in payload["checks"]}


def test_dry_run_names_every_check_as_skipped_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "dry")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload, md = report(tmp_path / "dry")
    assert payload["dry_run"] and payload["dry_run_reason"].startswith(NO_CUDA_REASON)
    assert [c["name"] for c in payload["checks"]] == list(gpu_check.CHECKS)
    for check in payload["checks"]:
        assert check["status"] == "skipped" and check["reason"].startswith(NO_CUDA_REASON), check
        assert check["plan"] and f"{check['title']}: skipped" in md
    assert "**Dry run**" in md and md.count(NO_CUDA_REASON) >= len(gpu_check.CHECKS)
    assert payload["summary"] == {"ran": 0, "skipped": len(gpu_check.CHECKS), "failed": 0}
    assert payload["machine"]["torch"] == torch.__version__
    plans = by_name(payload)
    assert all(p in plans["decode_paths"]["plan"] for p in ("eager", "static", "compiled", "fast"))
    assert "1, 2, 3, 5, 9, 17, 33, 65" in plans["cost_curve"]["plan"]
    assert "files" in plans["embedded_pair"]["data"]


def test_dry_run_with_a_python_without_torch(tmp_path):
    """The package needs torch; the script then loads gpu_check by its folder (no torch needed), and
    its plans still name the engine's decode paths."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; "
        f"sys.argv = ['gpu_check.py', '--out', {str(tmp_path / 'dry')!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload, md = report(tmp_path / "dry")
    assert payload["dry_run_reason"].startswith("no CUDA device: torch is not importable")
    assert [c["status"] for c in payload["checks"]] == ["skipped"] * len(gpu_check.CHECKS)
    assert payload["machine"]["torch"] is None and "torch is not importable" in md
    assert "on the paths eager, static, compiled, fast" in by_name(payload)["decode_paths"]["plan"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA runs the checks instead")
def test_asking_for_cuda_without_it_is_a_dry_run(tmp_path):
    assert script_main()(["--device", "cuda", "--out", str(tmp_path), "--checks", "energy,cost_curve"]) == 0
    payload, _ = report(tmp_path)
    assert payload["dry_run"] and [c["name"] for c in payload["checks"]] == ["energy", "cost_curve"]


def test_the_checks_run_on_the_cpu_when_asked(tmp_path):
    argv = [
        "--device",
        "cpu",
        "--quick",
        "--out",
        str(tmp_path),
        "--checks",
        "exactness,decode_paths,energy,cost_curve",
    ]
    assert script_main()(argv) == 0
    payload, md = report(tmp_path)
    checks = by_name(payload)
    assert not payload["dry_run"] and payload["device"] == "cpu"
    assert [checks[n]["status"] for n in ("exactness", "decode_paths", "cost_curve")] == ["ran"] * 3, md

    exact = checks["exactness"]["data"]
    assert {(r["arch"], r["path"]) for r in exact["tree_attention"]} == {
        ("llama", "eager"),
        ("llama", "static"),
        ("opt", "eager"),
    }
    assert all(r["ok"] for r in exact["tree_attention"])
    methods = set(gpu_check.methods())
    assert {r["method"] for r in exact["tokens"]} == methods and all(r["same"] for r in exact["tokens"])
    assert {r["pair"] for r in exact["tokens"]} == set(FLOAT64_PAIRS)
    assert len(exact["distribution"]) == len(dist_cases())
    assert all(r["ok"] and r["runs"] == 40 for r in exact["distribution"])

    paths = checks["decode_paths"]["data"]
    assert paths["paths"] == ["eager", "static", "fast"] and "compiled left out" in paths["note"]
    rows = paths["rows"]
    assert {(r["pair"], r["path"], r["method"]) for r in rows} == {
        (pair, path, m) for pair in ("tiny_llama", "tiny_llama_head") for path in paths["paths"] for m in methods
    }
    assert all(r["status"] == "ran" and r["tokens_per_s"] > 0 and r["block_efficiency"] >= 1 for r in rows)
    assert {r["resolved_path"] for r in rows if r["path"] == "fast"} == {"static"}  # fast is static on a CPU

    energy = checks["energy"]
    if energy["status"] == "skipped":  # no NVML for a CPU device: said why, after the decodes ran
        assert energy["reason"].startswith("no energy reading") and energy["data"]["tokens"] > 0
    else:
        assert energy["status"] == "ran" and energy["data"]["joules"] is not None

    curve = checks["cost_curve"]["data"]
    assert curve["model"] == "small" and [r["width"] for r in curve["rows"]] == list(gpu_check.CURVE_WIDTHS)
    assert all(r["eager_ms"] > 0 and r["static_ms"] > 0 for r in curve["rows"])
    assert curve["parameter_bytes"] > 10 * curve["kv_cache_bytes"] and curve["copy_bandwidth_gb_s"] > 0
    assert "| 65 |" in md and "static / floor" in md


def test_the_embedded_pair_is_skipped_without_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path / "empty-cache"))
    payload = gpu_check.run(gpu_check.Options(device="cpu", checks=("embedded_pair",)), tmp_path, log=lambda _: None)
    check = by_name(payload)["embedded_pair"]
    assert check["status"] == "skipped" and "never does" in check["reason"] and "SmolLM2" in check["reason"]
    assert gpu_check.exit_code(payload) == 0
    assert not (tmp_path / "empty-cache").exists()  # nothing fetched


def test_an_error_is_its_checks_result_and_the_others_still_run(tmp_path, monkeypatch):
    def broken(ctx):
        raise RuntimeError("kernel exploded")

    def unavailable(ctx):
        raise gpu_check.Skipped("no meter here", {"tokens": 3})

    monkeypatch.setitem(gpu_check.CHECKS, "exactness", replace(gpu_check.CHECKS["exactness"], run=broken))
    monkeypatch.setitem(gpu_check.CHECKS, "energy", replace(gpu_check.CHECKS["energy"], run=unavailable))
    options = gpu_check.Options(device="cpu", checks=("exactness", "energy"))
    payload = gpu_check.run(options, tmp_path, log=lambda _: None)
    checks = by_name(payload)
    assert (
        checks["exactness"]["status"] == "failed" and checks["exactness"]["reason"] == "RuntimeError: kernel exploded"
    )
    assert "kernel exploded" in checks["exactness"]["traceback"]
    assert checks["energy"]["status"] == "skipped" and checks["energy"]["reason"] == "no meter here"
    assert gpu_check.exit_code(payload) == 1
    _, md = report(tmp_path)
    assert "Failed: RuntimeError: kernel exploded" in md and '"tokens": 3' in md


def test_the_checks_names_are_the_engines():
    from mtad.bench.gpu_check import engine
    from mtad.decoding.registry import METHODS
    from mtad.decoding.static_kv import DECODE_PATHS

    assert gpu_check.decode_paths() == tuple(DECODE_PATHS) and gpu_check.methods() == tuple(METHODS)
    # what a python without torch reads: the engine's source
    assert engine.source_literal(engine.STATIC_KV_SOURCE, "DECODE_PATHS") == tuple(DECODE_PATHS)
    assert engine.source_methods(engine.DECODING_SOURCE) == tuple(METHODS)
    assert sorted(gpu_check.UNCOMPILED_PATHS + gpu_check.COMPILING_PATHS) == sorted(DECODE_PATHS)
    assert set(gpu_check.CURVE_PATHS) <= set(DECODE_PATHS)
    assert {method for _, _, method, _, _ in dist_cases()} <= set(METHODS)
    with pytest.raises(ValueError, match="unknown check"):
        gpu_check.Options(checks=("exactness", "speed"))
    with pytest.raises(ValueError, match="unknown decode path"):
        gpu_check.Options(paths=("turbo",))


def test_make_target_runs_without_install_and_writes_under_results_local():
    # inside another make (make test) its MAKEFLAGS print directories and its PY is exported: read the defaults
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PY")}

    def planned(*args: str) -> list[str]:
        out = subprocess.run(
            ["make", "--no-print-directory", "-n", "gpu-check", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert planned("PY=python3") == ["python3", "scripts/gpu_check.py", "--out", "results/local/gpu_check"]
    assert planned("GPU_CHECK_OUT=results/gpu_check", "ARGS=--quick") == [
        ".venv/bin/python",
        "scripts/gpu_check.py",
        "--out",
        "results/gpu_check",
        "--quick",
    ]
