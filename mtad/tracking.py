"""Experiment loggers chosen by ``conf/logger/``: ``none`` and ``wandb``.

Both offer the same four calls, used by ``mtad.run`` for one cell::

    logger = hydra.utils.instantiate(cfg.logger, name=cell_name, run_config=resolved_cfg)
    logger.log_example(step, row)     # one finished example (scalars are logged, rows kept): its scores,
                                      # new tokens, seconds, tokens/s, block efficiency, acceptance
                                      # (mtad.runner.cell.example_row)
    logger.log_metrics(metrics)       # the cell's aggregates (history + summary)
    logger.finish(failed=False)       # always called, also when the cell fails

W&B runs offline by default, so no account or network is needed; the run directory is
written under ``dir`` and can be uploaded later with ``wandb sync``. ``WANDB_MODE=online``
(after ``wandb login``) uploads live; the environment variable wins over the config.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping


def flatten_scalars(values: Mapping[str, Any], prefix: str = "") -> dict[str, float | int | str | bool]:
    """Nested dict -> {"a/b": scalar}; lists and None are left out (not plottable as scalars)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_scalars(value, prefix=f"{name}/"))
        elif isinstance(value, bool | int | str):
            flat[name] = value
        elif isinstance(value, float) and not math.isnan(value):
            flat[name] = value
    return flat


class NullLogger:
    """``logger=none``: records nothing."""

    def __init__(self, **_: Any):
        self.run_dir = None

    def log_example(self, step: int, row: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, Any]) -> None:
        pass

    def finish(self, failed: bool = False) -> None:
        pass


class WandbLogger:
    """Weights & Biases run for one cell: config, per-example rows, cell metrics."""

    def __init__(
        self,
        project: str,
        name: str,
        run_config: Mapping[str, Any] | None = None,
        mode: str = "offline",
        dir: str = ".",
        group: str | None = None,
        tags: list[str] | None = None,
        entity: str | None = None,
        job_type: str = "cell",
    ):
        import wandb

        dir = dir or "outputs"  # no Hydra output dir (e.g. the compose API)
        os.makedirs(dir, exist_ok=True)
        self._wandb = wandb
        self.mode = os.environ.get("WANDB_MODE", mode)
        self.run = wandb.init(
            project=project,
            entity=entity,
            name=name,
            group=group,
            tags=list(tags or []),
            job_type=job_type,
            config=dict(run_config or {}),
            dir=dir,
            mode=self.mode,
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", save_code=False),
        )
        self.run_dir = os.path.dirname(self.run.dir)  # .../wandb/<offline-run-...>
        self._rows: list[dict[str, Any]] = []

    def log_example(self, step: int, row: Mapping[str, Any]) -> None:
        scalars = flatten_scalars(row)
        self._rows.append(scalars)
        self.run.log({f"example/{k}": v for k, v in scalars.items() if not isinstance(v, str)}, step=step)

    def log_metrics(self, metrics: Mapping[str, Any]) -> None:
        scalars = flatten_scalars(metrics)
        self.run.summary.update(scalars)
        self.run.log({f"cell/{k}": v for k, v in scalars.items() if not isinstance(v, str)})

    def finish(self, failed: bool = False) -> None:
        if self._rows:
            columns = sorted({k for row in self._rows for k in row})
            table = self._wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in self._rows])
            self.run.log({"examples": table})
        self.run.finish(exit_code=1 if failed else 0)
