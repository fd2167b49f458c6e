"""One session of cells on one pair: the resources every cell of a run shares, and their lifecycle.

``mtad-run`` opens a session of one cell; the interleaved scheduler (``mtad.experiments.interleaved``)
one of several methods (and tasks) on the same pair. Either way the session

1. sets the torch threads, loads the pair (once per process), finds the devices it spans and
   opens the energy meter over them;
2. writes each cell's env.json start (one environment record, the same for every cell), binds
   each cell's task to the pair, builds its decoder from the plan's checked settings on the cell's
   own decode path (the one thing of the pair its cells may set apart) and scores again what a task
   could not score before;
3. warms every decoder up untimed on the first pending prompt and resets the peak-memory counters;
4. runs one (cell, example) at a time, as the scheduler orders them;
5. closes every cell (metrics.json, env.json finish).

    session = PairSession(first_cfg, runs)      # runs: {key: CellRecords}
    session.open()
    session.warm_up(example, keys)
    for key, example in order: session.run(key, example)
    metrics = session.close()                   # {key: metrics}
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any, Hashable

from omegaconf import DictConfig, OmegaConf

from mtad import provenance
from mtad.decoding.static_kv import kernel_record
from mtad.devices import model_devices, reset_peak_memory, set_threads
from mtad.runner.cell import CellRecords, now
from mtad.runner.checks import SettingError
from mtad.runner.loop import ExampleLoop

log = logging.getLogger("mtad.run")

_PAIR_CACHE: dict[str, Any] = {}


@functools.lru_cache(maxsize=None)
def log_once(level: int, message: str) -> None:
    """Log ``message`` the first time this process meets it: what holds for the machine (no
    energy counter to read) holds for every cell of a run, and a multirun of 24 cells says it once."""
    log.log(level, message)


def load_pair_cached(pair_cfg: dict):
    """Load a pair once per process: the cells of a multirun share it."""
    from mtad.models import load_pair

    key = json.dumps(pair_cfg, sort_keys=True, default=str)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()  # keep one pair in memory
        _PAIR_CACHE[key] = load_pair(pair_cfg)
    return _PAIR_CACHE[key]


class PairSession:
    """The pair, devices, energy meter and environment shared by ``runs``, and each run's runner."""

    def __init__(self, cfg: DictConfig, runs: dict[Hashable, CellRecords]):
        self.cfg, self.runs = cfg, runs  # cfg: the first cell's (threads, pair, energy, warm-up)
        self.pair = self.devices = self.meter = None
        self.runners: dict[Hashable, ExampleLoop] = {}

    def open(self) -> None:
        from mtad.generation import build_decoder
        from mtad.metrics.energy_meters import make_energy_meter

        set_threads(self.cfg.threads)
        pair_cfg = OmegaConf.to_container(self.cfg.pair, resolve=True)
        try:
            self.pair = load_pair_cached(pair_cfg)
        except ValueError as exc:  # a file or setting the models refuse once read: one line, not a traceback
            raise SettingError(f"pair={pair_cfg.get('name')}: {exc}") from None
        self.devices = model_devices(self.pair.target, self.pair.draft)
        self.meter, energy_reason = make_energy_meter(self.cfg.energy.meter, self.devices)
        if energy_reason:
            log_once(logging.INFO, f"energy: {energy_reason}")
        environment = {
            **provenance.environment_record(devices=self.devices, models=(self.pair.target, self.pair.draft)),
            "pair_name": getattr(self.pair, "name", None),
            # the fast path's product kernel per forward width, as calibrated on this machine
            "kernels": kernel_record({"target": self.pair.target, "draft": self.pair.draft}, self.pair.decode_path),
            # how `auto` chose the target's dtype on this machine (absent where the config named one)
            "dtype_choice": self.pair.config.get("dtype_choice"),
            "energy_missing_reason": energy_reason,
            "started": now(),
        }
        for key, run in self.runs.items():
            run.task.bind_pair(self.pair)
            decoder = build_decoder(
                run.cell.method, self.pair.target, self.pair.draft, self.decode_path(run), run.plan.method_settings
            )
            self.runners[key] = ExampleLoop(run.cfg, self.pair, run.task, decoder, self.meter, self.devices)
            run.start(environment)
            run.rescore()

    def decode_path(self, run: CellRecords) -> str:
        """The cell's own decode path: the cells of a session share the pair's models and may run them
        on different paths (the bench's eager and fast rows), and differ in nothing else of the pair."""
        shared = OmegaConf.to_container(self.cfg.pair, resolve=True)
        own = OmegaConf.to_container(run.cfg.pair, resolve=True)
        differ = sorted(k for k in {*shared, *own} if k != "decode_path" and shared.get(k) != own.get(k))
        if differ:
            raise SettingError(
                f"cell {run.cell.name}: its pair differs from the session's in {', '.join(differ)}; "
                "the cells of one session share one pair (run other targets in a session of their own)"
            )
        return own["decode_path"]

    def warm_up(self, example: dict | None, keys) -> None:
        """Untimed first calls (allocations, kernel selection) of each decoder of ``keys`` on
        ``example`` (None: nothing left to run) when the config asks for warm-up tokens; then the
        peak-memory counters restart."""
        if example is not None and self.cfg.warmup_tokens:
            for key in keys:
                self.runners[key].warm_up(example)
        reset_peak_memory(self.devices)

    def run(self, key: Hashable, example: dict) -> None:
        """Generate, score and record ``example`` in the cell ``key``."""
        self.runs[key].record(self.runners[key].run_example(example))

    def close(self, **extra) -> dict[Hashable, dict]:
        """Every cell's metrics.json and env.json finish; ``extra`` goes into each metrics.json."""
        return {key: run.close(self.devices, **extra) for key, run in self.runs.items()}
