"""The checks, one record each: `CHECKS` (name -> `Check`), in the order they run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .checks import cost_curve, decode_paths, embedded_pair, energy, exactness


@dataclass(frozen=True)
class Check:
    """One check of the GPU check.

    - `title`: its heading in the report;
    - `share`: the share of the time budget it may use (what a check leaves goes to the later ones);
    - `one_thread`: torch on one CPU thread while it runs (the tiny models' small products only lose
      to more threads);
    - `run`: Context -> its data; raises Skipped (it could not run here) or Failed (wrong results);
    - `plan`: (Options, device type) -> what it runs, in one line;
    - `section`: its data -> its Markdown lines in the report;
    - `missing_files`: Options -> why files it needs are not on this machine (None: they are). A
      dry run reports it, and a run gives a check whose files are missing no share of the budget.
    """

    name: str
    title: str
    share: float
    one_thread: bool
    run: Callable
    plan: Callable
    section: Callable
    missing_files: Callable | None = None


def check_of(module, title: str, share: float, one_thread: bool) -> Check:
    """The record of the check a `checks` module implements (its `run`, `plan`, `section` and,
    where it needs files, `missing_files`), named after the module."""
    name = module.__name__.rsplit(".", 1)[-1]
    return Check(name, title, share, one_thread, module.run, module.plan, module.section,
                 getattr(module, "missing_files", None))  # fmt: skip


CHECKS: dict[str, Check] = {
    check.name: check
    for check in (
        check_of(exactness, "exactness on the device (tiny float64 models against the CPU)", 0.3, True),
        check_of(decode_paths, "every method on every decode path (tiny pairs)", 0.35, True),
        check_of(energy, "NVML energy of a short decode", 0.04, True),
        check_of(
            cost_curve,
            "target cost curve (one forward per width over a 256-token cache) and copy bandwidth",
            0.11,
            False,
        ),
        check_of(embedded_pair, "the embedded pair's methods and speed-ups over sampling", 0.2, False),
    )
}
