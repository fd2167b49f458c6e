#!/usr/bin/env python
"""Regenerate every figure (PNG + PDF) from the cell files under results/runs; no model is loaded.

    python scripts/make_figures.py                         # results/runs -> results/figures
    python scripts/make_figures.py --results /tmp/results  # or MTAD_RESULTS=/tmp/results
    python scripts/make_figures.py --table-experiment smoke

Figures whose experiment has no cell yet are skipped with the reason (exit status 0); a figure
that fails to build is an error (exit status 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    from mtad.report.figures import build_all
    from mtad.report.sweeps import runs_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--results",
        default=None,
        help="the results folder holding runs/ (default: $MTAD_RESULTS, else the checkout's results/)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="where the figures go (default: <results>/figures for --results or $MTAD_RESULTS, else "
        "results/local/figures; `make figures` writes the committed results/figures)",
    )
    ap.add_argument("--table-experiment", default="table2", help="experiment of the Table 2 figures")
    ap.add_argument("--sweep-experiment", default="sweeps", help="experiment of the gamma/W/tau sweeps")
    args = ap.parse_args(argv)

    runs = Path(args.results) / "runs" if args.results else runs_dir()
    if args.out:
        out = Path(args.out)
    elif args.results or os.environ.get("MTAD_RESULTS"):  # a results folder of the user's: its figures beside
        out = runs.parent / "figures"
    else:  # the committed runs: read, never overwritten (`make figures` names results/figures)
        out = Path(__file__).resolve().parents[1] / "results" / "local" / "figures"
    if not runs.is_dir():
        print(
            f"no results at {runs}: run an experiment first (e.g. `make reproduce-table2`, `make sweep-gamma`)",
            file=sys.stderr,
        )
        return 1
    written = build_all(runs, out, table_experiment=args.table_experiment, sweep_experiment=args.sweep_experiment)
    for reason in written.pop("skipped"):
        print(f"skipped {reason}")
    for name, paths in written.items():
        print(f"{name}: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
