"""What a running check is given and what it may raise: its `Context` (the device, the options,
its deadline, the tiny pairs built once and the decode paths already warm), `Skipped` (it could not
run here) and `Failed` (its results are wrong)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .timed_decodes import tiny_pairs


class Skipped(Exception):
    """A check that could not run here: the reason, and what it measured before it stopped."""

    def __init__(self, reason: str, data: dict | None = None):
        super().__init__(reason)
        self.data = data or {}


class Failed(Exception):
    """A check whose results are wrong: what is wrong, and the results."""

    def __init__(self, reason: str, data: dict | None = None):
        super().__init__(reason)
        self.data = data or {}


@dataclass
class Context:
    """What a check runs with: the device, the options, its deadline and log, and what earlier checks
    left that it may reuse (the tiny pairs, the decode paths already warm)."""

    device: object  # torch.device
    options: Any  # the run's `options.Options` (not imported: the options are checked against the checks)
    until: float = float("inf")  # time.monotonic() deadline of the running check
    log: Callable[[str], None] = print
    pairs: dict | None = None  # the tiny pairs on the device, built once (their compiled bodies are kept)
    warm_paths: set = field(default_factory=set)  # (pair, path, method) that have run

    def tiny_pairs(self) -> dict:
        if self.pairs is None:
            self.pairs = tiny_pairs(self.device)
        return self.pairs

    @property
    def quick(self) -> bool:
        return self.options.quick

    def time_left(self) -> float:
        return self.until - time.monotonic()

    def out_of_time(self, need: float = 0.0) -> bool:
        return self.time_left() < need
