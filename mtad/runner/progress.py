"""One line at the start of each cell of a multirun: where it stands in the whole grid and when the
grid should be done, e.g.

    cell 5 of 28 (table2/smollm2_135m_head/cnndm/mtad): 4 done, ETA 11 min

The position is Hydra's job number; the grid's size is counted from the multirun's own config, which
Hydra's sweeper saves as ``multirun.yaml`` in the sweep folder before the first job
(``mtad.runner.grid.grid_jobs``); a command that runs cells beside its experiment's grid
counts the grid and those launches as one (``command_cells``). The ETA is the mean wall time of the
cells this process has started so far times the cells left, this one included ("ETA unknown"
before the first is done).
Outside a multirun (one cell, the interleaved scheduler) nothing is logged.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable

log = logging.getLogger("mtad.run")

_STARTS: list[float] = []  # when each cell this process ran started (time.monotonic)
_COMMAND: dict[str, int] = {}  # a command of several launches: its cells in all, and those before this launch


def command_cells(total: int, before: int) -> None:
    """A command runs several multiruns (its grid, then the cells beside it): ``total`` cells in all,
    ``before`` of them in the launches before the one that starts now. Positions then count across
    launches."""
    _COMMAND.update(total=total, before=before)


def fmt_duration(seconds: float) -> str:
    """A wait as a person reads it: seconds under a minute and a half, minutes under 90, else hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def progress_line(position: int, total: int | None, name: str, seconds_per_cell: float | None) -> str:
    """``cell <position> of <total> (<name>): <done> done, ETA <time>``; the cells before this one are
    done, and this one and those after it are left."""
    done = position - 1
    left = None if total is None else total - done
    eta = "ETA unknown" if seconds_per_cell is None or left is None else f"ETA {fmt_duration(seconds_per_cell * left)}"
    return f"cell {position} of {total if total is not None else '?'} ({name}): {done} done, {eta}"


@contextmanager
def running_app_set_aside():
    """Hydra holds one initialised app per process: the running job's is set aside while the grid is
    composed anew (``mtad.configs.compose``), then put back."""
    from hydra.core.global_hydra import GlobalHydra

    running = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        GlobalHydra.instance().hydra = running


@lru_cache(maxsize=8)
def grid_size(sweep_dir: str) -> int | None:
    """How many jobs the multirun whose sweep folder is ``sweep_dir`` runs, from the command line its
    ``multirun.yaml`` was composed with (Hydra's own overrides and the job's); None when that file
    cannot be read."""
    from omegaconf import OmegaConf

    from mtad.runner.grid import grid_jobs

    try:
        given = OmegaConf.load(Path(sweep_dir) / "multirun.yaml").hydra.overrides
        overrides = [*given.hydra, *given.task]  # hydra.searchpath=... among Hydra's own: an experiment of one's own
        with running_app_set_aside():
            return len(grid_jobs(overrides))
    except Exception as exc:  # noqa: BLE001 - the count is a courtesy: a launcher that left no file leaves it unknown
        log.debug("the multirun's size is unknown (%s: %s)", type(exc).__name__, exc)
        return None


def multirun_position() -> tuple[int, int | None] | None:
    """(this job's position from 1, the grid's size) in a Hydra multirun, counted across the command's
    launches where it runs several (``command_cells``); None outside one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        hydra = HydraConfig.get()
    except ValueError:  # not inside a Hydra job
        return None
    if hydra.mode != RunMode.MULTIRUN:
        return None
    if _COMMAND:
        return _COMMAND["before"] + int(hydra.job.num) + 1, _COMMAND["total"]
    return int(hydra.job.num) + 1, grid_size(str(hydra.sweep.dir))


def announce_cell(name: str, clock: Callable[[], float] = time.monotonic) -> None:
    """Log the progress line of the cell ``name`` starting now, when it is a job of a multirun."""
    position = multirun_position()
    if position is None:
        return
    now = clock()
    seconds_per_cell = (now - _STARTS[0]) / len(_STARTS) if _STARTS else None
    _STARTS.append(now)
    log.info("%s", progress_line(*position, name, seconds_per_cell))
