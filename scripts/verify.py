#!/usr/bin/env python
"""Rerun the committed reference cells (conf/experiment/verify.yaml) in a fresh process and
require identical tokens, perplexity, block efficiency, acceptance and scores.

    python scripts/verify.py                        # reference: results/verify
    python scripts/verify.py --keep /tmp/rerun      # keep the rerun's cells
    python scripts/verify.py --reference-only       # (re)create the reference instead
    python scripts/verify.py --kernels default      # rerun on other CPU kernels (as another CPU type would)

Exit status 0 when every cell reproduces, 1 with the differences listed otherwise: tokens and
counts identical, log-probabilities within the dtype's tolerance (mtad.report.reproduce).
Timing, energy and memory are not compared: they never reproduce exactly.

``--kernels`` makes torch and MKL use another instruction set than this CPU's best
(ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS): the sums then run in another order, as on
another CPU type, which shows on one machine what the reference survives.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mtad.report.reproduce import compare_runs, machine_differences  # noqa: E402

EXPERIMENT = "verify"
# --kernels: torch's vectorised kernels and MKL's code path, forced below the CPU's best
KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
NATIVE = "native"  # this CPU's best kernels: what the reference is written with and --kernels' default


def run_cells(results_root: Path, data_root: str | None, extra: list[str], kernels: str) -> int:
    """The verify experiment in a fresh process (nothing cached from this one)."""
    command = [
        sys.executable,
        "-m",
        "mtad.run",
        f"experiment={EXPERIMENT}",
        f"results_root={results_root}",
        f"hydra.sweep.dir={results_root}/.hydra",
    ]
    if data_root:
        command.append(f"data_root={data_root}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **KERNELS[kernels]}
    print(
        "verify: running",
        " ".join(command[1:] + extra),
        f"with {' '.join(f'{k}={v}' for k, v in KERNELS[kernels].items())}" if KERNELS[kernels] else "",
        flush=True,
    )
    return subprocess.run(command + extra, cwd=ROOT, env=env).returncode


def parser() -> argparse.ArgumentParser:
    """The command line, each option with its one default."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default=str(ROOT / "results" / "verify"), help="reference results root")
    ap.add_argument("--data-root", default=None, help="data root (default $MTAD_DATA or ~/.cache/mtad/data)")
    ap.add_argument("--keep", default=None, help="write the rerun here and keep it (default: a temporary folder)")
    ap.add_argument("--reference-only", action="store_true", help="(re)create the reference and stop")
    ap.add_argument(
        "--kernels",
        choices=sorted(KERNELS),
        default=NATIVE,
        help="rerun with torch/MKL kernels of another instruction set (default: this CPU's best)",
    )
    ap.add_argument("overrides", nargs="*", help="extra mtad-run overrides (tests: a tiny pair)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    reference = Path(args.reference)
    if args.reference_only:
        shutil.rmtree(reference, ignore_errors=True)
        status = run_cells(reference, args.data_root, args.overrides, NATIVE)
        shutil.rmtree(reference / ".hydra", ignore_errors=True)
        print(f"verify: reference written to {reference}" if status == 0 else "verify: the reference run failed")
        return status
    if not any(reference.rglob("metrics.json")):
        print(
            f"verify: no reference cells under {reference}; create them with `make verify-reference`", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="mtad-verify-") as tmp:
        rerun = Path(args.keep) if args.keep else Path(tmp) / "runs"
        shutil.rmtree(rerun, ignore_errors=True)
        if run_cells(rerun, args.data_root, args.overrides, args.kernels) != 0:
            print("verify: the rerun failed", file=sys.stderr)
            return 1
        differences = compare_runs(reference, rerun)
        machine = machine_differences(reference, rerun)
    cells = len(list(reference.rglob("metrics.json")))
    if differences:
        print(f"verify: FAILED, {len(differences)} difference(s) from the reference in {reference}:", file=sys.stderr)
        for line in differences:
            print(f"  {line}", file=sys.stderr)
        if machine:
            print(
                "verify: the machine or libraries differ from the reference's (exact reproduction is expected "
                "only on the same CPU type and library versions):",
                file=sys.stderr,
            )
            for line in machine:
                print(f"  {line}", file=sys.stderr)
        return 1
    print(
        f"verify: OK, {cells} cell(s) reproduce (tokens, block efficiency, acceptance and scores exactly; "
        "log-probabilities and perplexity within the dtype's tolerance); timing, energy and memory are not "
        f"compared{'' if args.kernels == NATIVE else f'; kernels: {args.kernels}'}"
    )
    for line in machine:
        print(f"  differs from the reference's machine: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
