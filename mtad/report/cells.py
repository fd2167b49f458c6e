"""Load every cell under ``results/runs`` into one pandas DataFrame (one row per cell).

    from mtad.report.cells import load_cells
    df = load_cells("results/runs")                    # every experiment
    df = load_cells("results/runs", experiment="table2")

A cell is a directory ``<experiment>/<pair>/<task>/<method>[/<overrides>]`` holding
``samples.jsonl`` and, once a run of it finished, ``metrics.json`` and ``env.json``
(written by ``mtad.run``). Cells that never finished a run appear with status
``running``/``failed`` and the example count read from ``samples.jsonl``.

Columns (missing values are NaN/None; nothing is filled in):

identity       experiment, pair, task, method, overrides ("" for the base cell), path
status         status ("complete", "incomplete" = fewer examples than planned,
               "running" = no metrics.json yet, "failed" = error.txt newer than metrics)
counts         examples, examples_planned, samples, generations (one per sample and turn)
task quality   score (the task's headline score), score_name, and score.<name> for every
               aggregate the task returned (e.g. score.rougeL, score.pass@1)
perplexity     perplexity, mean_logprob (target log-prob per generated token, raw p)
speed          tokens_per_s, decode_seconds (target_seconds, draft_seconds of it: inside the
               models' forwards), new_tokens, new_tokens_per_generation
acceptance     block_efficiency, acceptance_rate, mean_accept_length, target_calls,
               draft_calls, drafted, accepted, tree_nodes, target_calls_per_generation,
               draft_calls_per_generation
energy         energy_meter, energy_j, energy_j_per_token, energy_missing_reason
memory         peak_memory_mb, peak_memory_kind
machine        machine, dtype, devices, torch_threads, seed, git_commit, finished
config         param.<name> for every method hyperparameter (param.gamma, param.threshold,
               ...), max_new_tokens (the task's token limit)
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from mtad.tasks import TASKS

IDENTITY = ["experiment", "pair", "task", "method", "overrides"]


def primary_score(task: str, scores: dict) -> tuple[str | None, float | None]:
    """(name, value) of the task's headline score (``Task.primary_score``); the value stays
    None when the task could not score (e.g. MT-Bench without a judge) rather than falling back
    to another number, and both are None for a task the registry does not know."""
    task_class = TASKS.get(task)
    if task_class is None or task_class.primary_score not in scores:
        return None, None
    value = scores[task_class.primary_score]
    return task_class.primary_score, float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def find_cells(root: str | Path) -> list[Path]:
    """Cell directories: those holding samples.jsonl or metrics.json."""
    root = Path(root)
    dirs = {p.parent for pattern in ("samples.jsonl", "metrics.json") for p in root.rglob(pattern)}
    return sorted(dirs)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.endswith(b"\n"))
    except OSError:
        return 0


def cell_row(root: Path, directory: Path) -> dict:
    parts = directory.relative_to(root).parts
    if len(parts) < 4:
        raise ValueError(f"{directory} is not <experiment>/<pair>/<task>/<method>[/<overrides>] under {root}")
    metrics, env = _read_json(directory / "metrics.json"), _read_json(directory / "env.json")
    row = {"experiment": parts[0], "pair": parts[1], "task": parts[2], "method": parts[3],
           "overrides": "/".join(parts[4:]), "path": str(directory)}
    if metrics:
        row["status"] = metrics.get("status", "complete")
        error = directory / "error.txt"
        if error.exists() and error.stat().st_mtime > (directory / "metrics.json").stat().st_mtime:
            row["status"] = "failed"
    else:
        row["status"] = "failed" if (directory / "error.txt").exists() else "running"
        row["examples"] = _count_lines(directory / "samples.jsonl")
    skip = {"cell", "experiment", "pair", "task", "method", "overrides", "status", "scores"}
    row.update({k: v for k, v in metrics.items() if k not in skip})
    scores = metrics.get("scores") or {}
    for name, value in scores.items():
        if not isinstance(value, dict | list):
            row[f"score.{name}"] = value
    row["score_name"], row["score"] = primary_score(row["task"], scores)
    cell = env.get("cell") or {}
    for name, value in (cell.get("method") or {}).items():
        if name != "name":
            row[f"param.{name}"] = tuple(value) if isinstance(value, list) else value
    row["max_new_tokens"] = (cell.get("task") or {}).get("max_new_tokens")
    for key in ("machine", "dtype", "torch_threads", "seed"):
        row.setdefault(key, env.get(key))
    row["devices"] = ",".join(env.get("devices", [])) or None
    row["git_commit"] = (env.get("git") or {}).get("commit")
    return row


def load_cells(root: str | Path = "results/runs", experiment: str | None = None) -> pd.DataFrame:
    """One row per cell under ``root`` (optionally one experiment); columns in the module doc."""
    root = Path(root)
    base = root / experiment if experiment else root
    rows = [cell_row(root, d) for d in find_cells(base)] if base.exists() else []
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=IDENTITY + ["path", "status"])
    return df.sort_values(IDENTITY, kind="stable").reset_index(drop=True)
