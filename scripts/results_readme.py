"""Render results/README.md from the committed results (`make results-readme`); --check exits 1 when stale.

python scripts/results_readme.py [--results results] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtad.bench.render import readme_speed_lines
from mtad.bench.target_distance import readme_distance_lines
from mtad.distill.draft_measurement import readme_summary
from mtad.distill.head_reports import readme_lines
from mtad.report.results_readme import render


def page(results: Path) -> str:
    """The page of the results under `results`, the draft's and the bench's parts rendered by the packages
    that own them."""
    draft, bench = results / "draft", results / "bench"
    return render(
        results, readme_summary(draft), readme_lines(draft), readme_speed_lines(bench), readme_distance_lines(bench)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed page is not the rendering")
    args = ap.parse_args(argv)
    out, text = args.results / "README.md", page(args.results)
    if args.check:
        stale = not out.is_file() or out.read_text() != text
        print(f"{out}: {'stale (make results-readme)' if stale else 'up to date'}")
        return int(stale)
    if not out.is_file() or out.read_text() != text:
        out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
