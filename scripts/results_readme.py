"""Render results/README.md from the committed results (`make results-readme`); --check exits 1 when stale.

python scripts/results_readme.py [--results results] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mtad.distill.draft_measurement import readme_block
from mtad.report.results_readme import render


def page(results: Path) -> str:
    measure = results / "draft" / "measure.json"
    return render(results, readme_block(json.loads(measure.read_text())) if measure.is_file() else None)


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
