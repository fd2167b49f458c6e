"""A run stopped by Ctrl-C, in one line: what its cells keep and how to go on.

Every finished example is appended to its cell's ``samples.jsonl`` (and fsynced) as it finishes,
so an interrupted run loses only the examples in progress, and the same command resumes from the
records. The entry points (``mtad-run``, the claims command) catch ``KeyboardInterrupt`` at their
top level, where neither Hydra's launcher nor its error report has turned it into a traceback, and
exit with ``INTERRUPTED``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mtad.records import parse_records
from mtad.runner.layout import SAMPLES

INTERRUPTED = 130  # 128 + SIGINT: the status a shell gives a command that Ctrl-C stopped


def recorded(cell: Path) -> int:
    """How many examples the cell's records hold (valid records, each id once; a line that Ctrl-C
    tore is not one, and is cut off when the cell resumes)."""
    try:
        raw = (Path(cell) / SAMPLES).read_bytes()
    except FileNotFoundError:
        return 0
    return len(parse_records(raw)[0])


def kept_examples(cells: list[Path]) -> tuple[int, int]:
    """(examples recorded, cells holding any) over the cell folders ``cells``."""
    counts = [recorded(c) for c in cells]
    return sum(counts), sum(1 for n in counts if n)


def shown(path: Path) -> str:
    """``path`` as a user would type it: relative to the working folder when it lies below it."""
    path = Path(path).absolute()
    return os.path.relpath(path) if Path.cwd() in path.parents else str(path)


def interrupted_line(program: str, cells: list[Path], folder: Path | None = None) -> str:
    """``<program>: interrupted; N examples kept in M cells (<folder>); rerun ...`` for the cell
    folders this process had begun (none: it had begun none; a launcher that runs cells in other
    processes begins none here); ``folder``: where they lie, by default the folder they share."""
    if not cells:
        return f"{program}: interrupted before this process began a cell; rerun the same command to resume"
    examples, holding = kept_examples(cells)
    folder = folder or Path(os.path.commonpath([Path(c).absolute() for c in cells]))
    return (
        f"{program}: interrupted; {examples} example{'s' * (examples != 1)} kept in {holding} "
        f"cell{'s' * (holding != 1)} ({shown(folder)}); rerun the same command to resume"
    )


def cells_under(folder: Path) -> list[Path]:
    """The cell folders below ``folder`` (those with a ``samples.jsonl``)."""
    return sorted(p.parent for p in Path(folder).rglob(SAMPLES)) if Path(folder).is_dir() else []
