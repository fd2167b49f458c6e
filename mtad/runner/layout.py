"""Cell identity and folder layout: where a cell lives and which settings name it.

A cell is ``<results_root>/<experiment>/<pair>/<task>/<method>[/<overrides>]/`` holding
``samples.jsonl``, ``metrics.json``, ``env.json`` and, after a failed run, ``error.txt``.
``<overrides>`` holds the command-line overrides that change what is generated (e.g.
``method.gamma=3``); settings that do not (``limit``, paths, loggers) never name a directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtad.records import read_json

SAMPLES, METRICS, ENV, ERROR = "samples.jsonl", "metrics.json", "env.json", "error.txt"
REFERENCE_ROOT = "results/runs"  # the committed reference run, relative to the repository root
THEORY = "theory.json"  # an experiment's tiny-model checks (C5, C6): <results_root>/<experiment>/theory.json
CURVE = "curve.json"  # the bench's verification-cost curve: <results_root>/<experiment>/<pair>/curve.json
IDENTITY_PARTS = ("experiment", "pair", "task", "method")  # the directory levels below results_root

# Override keys that do not change what a cell generates: they never name a directory.
NEUTRAL_KEYS = {
    "experiment",
    "pair",
    "task",
    "method",
    "sweep",
    "logger",
    "energy",
    "hydra",
    "experiment_name",
    "limit",
    "data_root",
    "results_root",
    "progress",
    "warmup_tokens",
    "threads",
    "missing_data",
    "beside_grid",  # which cells a command runs beside an experiment's grid, not what one generates
}
NEUTRAL_PREFIXES = ("logger.", "energy.", "hydra.", "hydra/")


@dataclass(frozen=True)
class CellAddress:
    """Where a cell lives (`directory`) and the settings that name it; the settings it runs are
    `cell.CellSettings`, its records `cell.CellRecords`, its loop `loop.ExampleLoop`, and the pair
    its runs share `session.PairSession`."""

    experiment: str
    pair: str
    task: str
    method: str
    overrides: str  # "" or e.g. "method.gamma=3,seed=1"
    directory: Path
    command_line: tuple[str, ...] = ()  # the overrides as given (`task.<key>=...` wins over per_task)

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.experiment, self.pair, self.task, self.method, self.overrides) if p)


def override_dirname(overrides: list[str]) -> str:
    """The generation-changing command-line overrides, sorted, as ``k=v,k2=v2``."""
    kept = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in NEUTRAL_KEYS or key.startswith(NEUTRAL_PREFIXES):
            continue
        if key == "task.limit" or (key.startswith("per_task.") and key.endswith(".limit")):
            continue
        if ".judge." in f".{key}" and key.rsplit(".", 1)[-1] in JUDGE_CONNECTION:
            continue  # how the judge is reached
        kept.append(f"{key}={value}".replace("/", "_"))
    return ",".join(sorted(kept))


def cell_directory(
    results_root: str | Path, experiment: str, pair: str, task: str, method: str, overrides: str = ""
) -> Path:
    directory = Path(results_root) / experiment / pair / task / method
    return directory / overrides if overrides else directory


def theory_path(results_root: str | Path, experiment: str) -> Path:
    return Path(results_root) / experiment / THEORY


def curve_path(results_root: str | Path, experiment: str, pair: str) -> Path:
    return Path(results_root) / experiment / pair / CURVE


def parse_cell_directory(results_root: str | Path, directory: str | Path) -> dict[str, str]:
    """The identity parts of a cell directory (the inverse of ``cell_directory``)."""
    parts = Path(directory).relative_to(results_root).parts
    if len(parts) < len(IDENTITY_PARTS):
        raise ValueError(f"{directory} is not <experiment>/<pair>/<task>/<method>[/<overrides>] under {results_root}")
    return {**dict(zip(IDENTITY_PARTS, parts)), "overrides": "/".join(parts[len(IDENTITY_PARTS) :])}


def is_complete(directory: Path) -> bool:
    """The cell's last finished run covered every planned example (its results stand)."""
    return read_json(Path(directory) / METRICS).get("status") == "complete"


def resolve_cell(cfg, hydra_config) -> CellAddress:
    choices = hydra_config.runtime.choices
    names = {group: choices.get(group) for group in ("pair", "task", "method")}
    missing = [g for g, v in names.items() if not v]
    if missing:
        raise ValueError(f"no {', '.join(missing)} chosen; pick one, e.g. method=mtad task=cnndm")
    overrides = override_dirname(list(hydra_config.overrides.task))
    directory = cell_directory(
        cfg.results_root, cfg.experiment_name, names["pair"], names["task"], names["method"], overrides
    )
    command_line = tuple(hydra_config.overrides.task)
    names = (cfg.experiment_name, names["pair"], names["task"], names["method"])
    return CellAddress(*names, overrides, directory, command_line)


# How a judge is reached changes no answer and no grade: not part of a cell's identity.
JUDGE_CONNECTION = ("base_url", "api_key_env", "timeout_s", "retries", "backoff_s")


def cell_identity(cfg, cell: CellAddress, task_options: dict) -> dict:
    """Everything that decides what the cell generates and how it is scored (not how many
    examples, nor how a judge is reached)."""
    from omegaconf import OmegaConf

    return _without_connection(
        {
            "experiment": cell.experiment,
            "pair": {"name": cell.pair, **OmegaConf.to_container(cfg.pair, resolve=True)},
            "task": {"name": cell.task, **task_options},
            "method": {"name": cell.method, **OmegaConf.to_container(cfg.method, resolve=True)},
            "seed": cfg.seed,
            "stop_rule": cfg.stop_rule,
        }
    )


def _without_connection(identity: dict) -> dict:
    identity = json.loads(json.dumps(identity))
    judge = (identity.get("task") or {}).get("judge")
    if isinstance(judge, dict):
        for key in JUDGE_CONNECTION:
            judge.pop(key, None)
    return identity


def check_identity(directory: Path, identity: dict) -> None:
    """Refuse a cell directory whose recorded config differs from ``identity``, listing the differences
    (a cell recorded with its judge's connection settings compares without them)."""
    recorded = read_json(Path(directory) / ENV).get("cell")
    if recorded is None:
        return
    recorded, identity = _without_connection(recorded), _without_connection(identity)
    if recorded == identity:
        return
    diffs = _diff(recorded, identity)
    raise ValueError(
        f"{directory} holds results of a different config ({'; '.join(diffs)}). Use another "
        "experiment_name, pass the change as a command-line override (it then gets its own "
        "directory), or delete that directory to start it again."
    )


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d for k in sorted(set(old) | set(new)) for d in _diff(old.get(k), new.get(k), f"{path}.{k}".lstrip("."))
        ]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]
