#!/usr/bin/env python
"""Build Table 2 (.md and .csv) from the cells of one experiment under results/runs.

    python scripts/make_table.py                          # experiment table2 -> results/tables/table2.{md,csv}
    python scripts/make_table.py --experiment smoke       # -> results/tables/table2_smoke.{md,csv}
    python scripts/make_table.py --experiment table2_full # -> results/tables/table2_full.{md,csv}
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtad.report.tables import build_table2  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="table2", help="experiment name under results/runs (default table2)")
    parser.add_argument("--results", default="results/runs", help="results root (default results/runs)")
    parser.add_argument("--out", default="results/tables", help="output directory (default results/tables)")
    parser.add_argument("--pair", default=None, help="pair, when the experiment holds several")
    parser.add_argument("--name", default=None, help="file stem (default table2, or table2_<experiment>)")
    parser.add_argument("--overrides", default="", help="the cells' override directory ('' = base cells; "
                        "'any' = whatever single override set the cells have)")
    args = parser.parse_args(argv)
    try:
        md, csv = build_table2(args.results, args.out, args.experiment, args.pair, args.name,
                               None if args.overrides == "any" else args.overrides)
    except ValueError as err:
        print(f"make_table: {err}", file=sys.stderr)
        return 1
    print(md.read_text())
    print(f"wrote {md} and {csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
