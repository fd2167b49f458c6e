#!/usr/bin/env python
"""Regenerate every figure (PNG + PDF) from the cell files of a results root; no model is loaded.

    python scripts/make_figures.py                          # committed results/runs -> results/local/figures
    python scripts/make_figures.py --results results/local  # your runs (results/local/runs) -> results/local/figures
    python scripts/make_figures.py --results /tmp/mine --experiment smoke   # or MTAD_RESULTS=/tmp/mine
    python scripts/make_figures.py --experiment mypair --overrides pair.target_dtype=float32

--results, --experiment (the Table 2 figures' experiment; --table-experiment is the same option),
--overrides (the Table 2 figures' override set) and --out mean the same in scripts/make_table.py
(mtad/report/roots.py). Figures whose experiment has no cell yet are skipped with the reason
(exit status 0); a figure that cannot be built is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parser() -> argparse.ArgumentParser:
    """The command line; --sweep-experiment defaults to `build_all`'s own."""
    from mtad.report.figures import build_all
    from mtad.report.roots import add_report_options

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_report_options(ap, "figures")
    ap.add_argument("--table-experiment", dest="experiment", help="the same as --experiment")
    ap.add_argument(
        "--sweep-experiment",
        default=inspect.signature(build_all).parameters["sweep_experiment"].default,  # the one default
        help="experiment of the gamma/W/tau sweeps",
    )
    return ap


def main(argv=None) -> int:
    from mtad.report.figures import build_all
    from mtad.report.roots import NoResults, report_options

    args = parser().parse_args(argv)
    try:
        options = report_options(args, "figures")
        print(options.describe())
        written = build_all(
            options.runs,
            options.out,
            table_experiment=options.experiment,
            sweep_experiment=args.sweep_experiment,
            overrides=options.overrides,
        )
    except (NoResults, ValueError) as err:
        print(f"make_figures: {err}", file=sys.stderr)
        return 1
    for reason in written.pop("skipped"):
        print(f"skipped {reason}")
    for name, paths in written.items():
        print(f"{name}: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
