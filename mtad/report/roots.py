"""Which cells a report reads and where it writes: one meaning of ``--results``, ``--experiment``,
``--overrides`` and ``--out`` for ``scripts/make_table.py`` and ``scripts/make_figures.py``, and of
``$MTAD_RESULTS`` for the notebooks.

A results root is a folder holding ``runs/`` (the cells, ``results_root`` of ``mtad-run``) and the
outputs built from them (``tables/``, ``figures/``). ``--results`` and ``$MTAD_RESULTS`` name either
the root or its runs folder: a folder with a ``runs/`` child is a root. A report writes beside the
runs it read (``<root>/tables``, ``<root>/figures``), except for the committed reference
(``results/runs``), whose reports go to ``results/local/`` unless ``--out`` names the committed
folders (``make table``, ``make figures``).

    parser = argparse.ArgumentParser()
    add_report_options(parser, "tables")
    options = report_options(parser.parse_args(), "tables")   # NoResults: one line to print
    options.runs, options.experiment, options.overrides, options.out
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from mtad.runner.layout import METRICS, REFERENCE_ROOT, SAMPLES

REPO = Path(__file__).resolve().parents[2]
REFERENCE_RUNS = REPO / REFERENCE_ROOT
LOCAL_ROOT = REPO / "results" / "local"  # ignored by git: where reports of the reference go
ANY_OVERRIDES = "any"  # --overrides any: whatever single override set the cells have


class NoResults(FileNotFoundError):
    """The folder a report was pointed at holds no cell (missing, empty, or not a results root)."""


def runs_folder(path: str | Path, base: Path | None = None) -> Path:
    """The runs folder ``path`` names: ``path/runs`` when it has one (a results root), else ``path``
    itself; a relative ``path`` is taken from ``base`` when given (else from the working directory)."""
    path = Path(path).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return path / "runs" if (path / "runs").is_dir() else path


def has_cells(runs: Path) -> bool:
    """Whether any cell (a folder with samples.jsonl or metrics.json) lies under ``runs``."""
    return runs.is_dir() and any(next(runs.rglob(name), None) is not None for name in (SAMPLES, METRICS))


def require_cells(runs: Path, named_by: str) -> Path:
    """``runs`` when it holds a cell; else NoResults with the folder looked at (and where its name
    came from) and the command that fills it."""
    if has_cells(runs):
        return runs
    what = (
        "the folder does not exist"
        if not runs.exists()
        else "neither it nor a runs/ folder inside it holds a cell (samples.jsonl or metrics.json)"
    )
    raise NoResults(
        f"no results at {runs} ({named_by}): {what}; run an experiment into it first, "
        f"e.g. `make reproduce-table2 RESULTS={runs}` or `mtad-run ... results_root={runs}`"
    )


def default_runs() -> tuple[Path, str]:
    """(runs folder, where its name came from): ``$MTAD_RESULTS`` (a results root or its runs folder;
    relative to the repository root, wherever the reader runs), else the committed reference."""
    named = os.environ.get("MTAD_RESULTS")
    if named:
        return runs_folder(named, base=REPO), f"MTAD_RESULTS={named}"
    return REFERENCE_RUNS, "the committed reference; set MTAD_RESULTS or --results for other cells"


def out_folder(runs: Path, kind: str) -> Path:
    """Where reports of ``kind`` ("tables", "figures") built from ``runs`` go by default: beside it
    in its results root, or results/local/<kind> for the committed reference (never overwritten
    unless asked for by name)."""
    if runs.resolve() == REFERENCE_RUNS.resolve():
        return LOCAL_ROOT / kind
    return runs.parent / kind


def add_report_options(parser: argparse.ArgumentParser, kind: str) -> None:
    """--results, --experiment, --overrides and --out, with one meaning in every report script."""
    parser.add_argument(
        "--results",
        default=None,
        help="the cells to read: a results root (holding runs/) or its runs folder, e.g. results/local or "
        "results/local/runs (default: $MTAD_RESULTS, else the committed results/runs)",
    )
    parser.add_argument("--experiment", default="table2", help="the experiment of the cells (default table2)")
    parser.add_argument(
        "--overrides",
        default="",
        help="the cells' override folder, e.g. method.gamma=3 ('' = the base cells, the default; "
        f"'{ANY_OVERRIDES}' = whatever single override set the cells have)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help=f"where the {kind} go (default: {kind}/ in the results root read, e.g. results/local/{kind} for "
        f"results/local/runs; results/local/{kind} for the committed reference)",
    )


@dataclass(frozen=True)
class ReportOptions:
    runs: Path  # the runs folder read
    source: str  # where its name came from (--results, $MTAD_RESULTS, the default)
    experiment: str
    overrides: str | None  # None: whatever single override set the cells have
    out: Path

    def describe(self) -> str:
        """The line a report prints first: which cells it read."""
        return f"reading cells under {self.runs} ({self.source}); writing to {self.out}"


def report_options(args: argparse.Namespace, kind: str) -> ReportOptions:
    """The parsed options resolved: the runs folder (checked to hold cells), the override set and
    the output folder. Raises NoResults (one line) when there is nothing to read."""
    if args.results:
        runs, source = runs_folder(args.results), f"--results {args.results}"
    else:
        runs, source = default_runs()
    require_cells(runs, source)
    out = Path(args.out) if args.out else out_folder(runs, kind)
    overrides = None if args.overrides == ANY_OVERRIDES else args.overrides
    return ReportOptions(runs, source, args.experiment, overrides, out)
