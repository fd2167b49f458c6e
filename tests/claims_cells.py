"""Copying committed claims cells into a test's own results root."""

import shutil
from pathlib import Path

from mtad.runner.lock import LOCK


def copy_cells(source: Path, destination: Path) -> None:
    """The cells under `source` copied to `destination` without their variant cells (the
    `method.*` directories an override names) or their lock files."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("method.*", f"{LOCK}*"))
