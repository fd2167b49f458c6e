"""Where a decoding block's time goes, by phase: recorded only while a `Profile` is active.

The decoders mark their host work with `phase(name)` (a `with` block) or `@phased(name)`; the
forwards record themselves (`record_forward`: which model, how many new positions, seconds).
With no profile active a marker costs one attribute test. Phases nest: time spent inside an
inner phase is charged to it and not to the outer one, so the phases of a block add up, and
what is left of its wall time is the Python between them (`Profile.split`).

Phases (PHASES): `process` logits to processed distributions (temperature, top-k, top-p);
`sample` draws; `accept` the acceptance rules (and MMTAD's path products); `drafting` the
bookkeeping of chains, tries, trees and beams while drafting (beam scores, node lists);
`mask` tree-attention masks and ancestor sets built before a forward; `commit` cache crops
and path commits after acceptance.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from dataclasses import dataclass, field

PHASES = ("process", "sample", "accept", "drafting", "mask", "commit")


@dataclass
class Profile:
    seconds: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    calls: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    # (model, new positions) -> [calls, seconds]: "target" or "draft" ("<model> prefill" for a prompt's
    # own forward), the forward's width
    forwards: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))
    _stack: list = field(default_factory=list)  # [name, start, seconds in inner phases] per open phase

    def split(self, wall_seconds: float) -> dict:
        """The block's wall time split into forwards, each phase and the Python left between them
        (seconds)."""
        out = {"target": 0.0, "draft": 0.0, "target prefill": 0.0, "draft prefill": 0.0}
        for (model, _), (_, seconds) in self.forwards.items():
            out[model] += seconds
        out.update(self.seconds)
        out["python"] = wall_seconds - sum(out.values())
        return out

    def block_record(self, wall_seconds: float) -> dict:
        """A generation's record of where its blocks' time went: ``seconds`` split as `split` less the
        prompts' own forwards (a block is what repeats), ``target_widths`` the target's block forwards
        by width (new positions -> [calls, seconds]) and ``blocks`` (one target call each)."""
        seconds = self.split(wall_seconds)
        for model in ("target", "draft"):
            del seconds[f"{model} prefill"]
        widths = {str(w): [calls, s] for (model, w), (calls, s) in sorted(self.forwards.items()) if model == "target"}
        return {"seconds": seconds, "target_widths": widths, "blocks": sum(c for c, _ in widths.values())}


_ACTIVE: list[Profile | None] = [None]


class phase:
    """`with phase("accept"):` charges the block's wall time to that phase while a profile is active."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        profile = _ACTIVE[0]
        if profile is not None:
            profile._stack.append([self.name, time.perf_counter(), 0.0])

    def __exit__(self, *exc) -> None:
        profile = _ACTIVE[0]
        if profile is None or not profile._stack:
            return
        name, start, inner = profile._stack.pop()
        elapsed = time.perf_counter() - start
        profile.seconds[name] += elapsed - inner
        profile.calls[name] += 1
        if profile._stack:  # the enclosing phase does not count this time again
            profile._stack[-1][2] += elapsed


def phased(name: str):
    """A function whose calls are charged to phase `name`."""

    def wrap(fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with phase(name):
                return fn(*args, **kwargs)

        return timed

    return wrap


def record_forward(model: str, width: int, seconds: float) -> None:
    """A forward of `model` ("target", "draft", or either's "... prefill") over `width` new positions
    took `seconds`."""
    profile = _ACTIVE[0]
    if profile is not None:
        if profile._stack:  # a forward inside a phase (a tree level inside `drafting`) is not that phase
            profile._stack[-1][2] += seconds
        entry = profile.forwards[(model, width)]
        entry[0] += 1
        entry[1] += seconds


class profiling:
    """`with profiling() as profile:` records every marker and forward until the block ends."""

    def __enter__(self) -> Profile:
        if _ACTIVE[0] is not None:
            raise RuntimeError("a profile is already active")
        _ACTIVE[0] = Profile()
        return _ACTIVE[0]

    def __exit__(self, *exc) -> None:
        _ACTIVE[0] = None
