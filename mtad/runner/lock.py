"""One writer per cell: a run holds the cell's lock while it writes there.

The lock is an OS file lock (``filelock``) on ``<cell>/.cell.lock``, so it is released when the
holder exits, however it ends; the holder writes who it is beside it. A second run of the
same cell does not wait: it stops at once with a message naming the holder (its finished
examples are kept, so running it again later continues where the holder stopped).
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from mtad.runner.checks import SettingError

LOCK, HOLDER = ".cell.lock", ".cell.lock.holder"


class CellBusy(SettingError):
    """Another run is writing this cell."""


@contextmanager
def cell_lock(directory: Path, name: str):
    """Hold the cell at ``directory`` for the duration (``CellBusy`` if another run holds it)."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = FileLock(directory / LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = (directory / HOLDER).read_text().strip()
        except OSError:
            holder = "a process that did not say who it is"
        raise CellBusy(
            f"cell {name} is being written by another run ({holder}); let it finish or stop it, then "
            "run again: finished examples are kept"
        ) from None
    try:
        (directory / HOLDER).write_text(
            f"pid {os.getpid()} on {socket.gethostname()}, since "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\n"
        )
        yield
    finally:
        (directory / HOLDER).unlink(missing_ok=True)
        lock.release()
