#!/usr/bin/env python
"""Rerun the committed reference cells (conf/experiment/verify.yaml) in a fresh process and
require identical tokens, perplexity, block efficiency, acceptance and scores.

    python scripts/verify.py                        # reference: results/verify
    python scripts/verify.py --keep /tmp/rerun      # keep the rerun's cells
    python scripts/verify.py --reference-only       # (re)create the reference instead

Exit status 0 when every cell reproduces, 1 with the differences listed otherwise. Timing,
energy and memory are not compared: they never reproduce exactly.
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


def run_cells(results_root: Path, data_root: str | None, extra: list[str]) -> int:
    """The verify experiment in a fresh process (nothing cached from this one)."""
    command = [sys.executable, "-m", "mtad.run", f"experiment={EXPERIMENT}", f"results_root={results_root}",
               f"hydra.sweep.dir={results_root}/.hydra"]
    if data_root:
        command.append(f"data_root={data_root}")
    print("verify: running", " ".join(command[1:] + extra), flush=True)
    return subprocess.run(command + extra, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", default=str(ROOT / "results" / "verify"), help="reference results root")
    parser.add_argument("--data-root", default=None, help="data root (default $MTAD_DATA or ~/.cache/mtad/data)")
    parser.add_argument("--keep", default=None, help="write the rerun here and keep it (default: a temporary folder)")
    parser.add_argument("--reference-only", action="store_true", help="(re)create the reference and stop")
    parser.add_argument("overrides", nargs="*", help="extra mtad-run overrides (tests: a tiny pair)")
    args = parser.parse_args(argv)
    reference = Path(args.reference)
    if args.reference_only:
        shutil.rmtree(reference, ignore_errors=True)
        status = run_cells(reference, args.data_root, args.overrides)
        shutil.rmtree(reference / ".hydra", ignore_errors=True)
        print(f"verify: reference written to {reference}" if status == 0 else "verify: the reference run failed")
        return status
    if not any(reference.rglob("metrics.json")):
        print(f"verify: no reference cells under {reference}; create them with `make verify-reference`",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mtad-verify-") as tmp:
        rerun = Path(args.keep) if args.keep else Path(tmp) / "runs"
        shutil.rmtree(rerun, ignore_errors=True)
        if run_cells(rerun, args.data_root, args.overrides) != 0:
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
            print("verify: the machine or libraries differ from the reference's (exact reproduction is expected "
                  "only on the same CPU type and library versions):", file=sys.stderr)
            for line in machine:
                print(f"  {line}", file=sys.stderr)
        return 1
    print(f"verify: OK, {cells} cell(s) reproduce exactly (tokens, perplexity, block efficiency, acceptance, "
          "scores); timing, energy and memory are not compared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
