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


CHECKS: dict[str, Check] = {
    check.name: check
    for check in (
        Check(
            name="exactness",
            title="exactness on the device (tiny float64 models against the CPU)",
            share=0.3,
            one_thread=True,
            run=exactness.run,
            plan=exactness.plan,
            section=exactness.section,
        ),
        Check(
            name="decode_paths",
            title="every method on every decode path (tiny pairs)",
            share=0.35,
            one_thread=True,
            run=decode_paths.run,
            plan=decode_paths.plan,
            section=decode_paths.section,
        ),
        Check(
            name="energy",
            title="NVML energy of a short decode",
            share=0.04,
            one_thread=True,
            run=energy.run,
            plan=energy.plan,
            section=energy.section,
        ),
        Check(
            name="cost_curve",
            title="target cost curve (one forward per width over a 256-token cache) and copy bandwidth",
            share=0.11,
            one_thread=False,
            run=cost_curve.run,
            plan=cost_curve.plan,
            section=cost_curve.section,
        ),
        Check(
            name="embedded_pair",
            title="the embedded pair's methods and speed-ups over sampling",
            share=0.2,
            one_thread=False,
            run=embedded_pair.run,
            plan=embedded_pair.plan,
            section=embedded_pair.section,
            missing_files=embedded_pair.missing_files,
        ),
    )
}
