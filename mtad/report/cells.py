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
status         status ("complete", "incomplete" = fewer examples than planned or answers
               not scored yet (incomplete_reason says which), "missing" = the task's data
               was absent (missing_reason: why, and the command that gets it),
               "running" = no metrics.json yet, "failed" = error.txt newer than metrics)
counts         examples, examples_planned, samples, generations (one per sample and turn)
task quality   score (the task's headline score), score_name, and score.<name> for every
               aggregate the task returned (e.g. score.rougeL, score.pass@1)
perplexity     perplexity, mean_logprob (target log-prob per generated token, raw p)
speed          tokens_per_s, decode_seconds (target_seconds, draft_seconds of it: inside the
               models' forwards), new_tokens, new_tokens_per_generation
acceptance     block_efficiency, acceptance_rate, mean_accept_length, target_calls,
               draft_calls, drafted, accepted, tree_nodes, draft_rows, prompt_tokens,
               target_calls_per_generation, draft_calls_per_generation
energy         energy_meter, energy_j, energy_j_per_token, energy_missing_reason
memory         peak_memory_mb, peak_memory_kind
machine        machine, dtype, devices, torch_threads, seed, finished
provenance     git_commit, git_dirty, git_diff_sha256 (the code state of the cell's last
               writing run, read when that process started), provenance (every code state
               that wrote the cell's records: "<commit>", "<commit>+dirty:<hash>", joined
               by " + " when several)
config         param.<name> for every method hyperparameter (param.gamma, param.threshold,
               ...), max_new_tokens (the task's token limit)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mtad.provenance import provenance_key, recorded_machine_name
from mtad.records import read_json, read_records
from mtad.runner.layout import ENV, ERROR, METRICS, SAMPLES, parse_cell_directory
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
    return task_class.primary_score, float(value) if isinstance(value, int | float) and not isinstance(
        value, bool
    ) else None


def find_cells(root: str | Path) -> list[Path]:
    """Cell directories: those holding samples.jsonl or metrics.json."""
    root = Path(root)
    dirs = {p.parent for pattern in (SAMPLES, METRICS) for p in root.rglob(pattern)}
    return sorted(dirs)


def cell_provenance(env: dict) -> str | None:
    """The code state(s) that wrote the cell's records, one key each (``provenance_key``),
    joined by " + " when a resumed cell was written by several; None without env.json."""
    keys = list(dict.fromkeys(provenance_key(g) for g in env.get("git_runs", [])))
    return " + ".join(keys) if keys else None


def model_dtypes(pair: dict, realized: str | None) -> tuple[str | None, str | None]:
    """(target, draft) dtype of a cell: the pair's settings, or where a setting is `auto` the one
    dtype the cell's models ran in (None when they ran in several and the setting does not say)."""
    ran = (realized or "").split(",")
    return tuple(
        pair.get(key) if pair.get(key) not in (None, "auto") else (ran[0] if len(ran) == 1 and ran[0] else None)
        for key in ("target_dtype", "draft_dtype")
    )


def cell_row(root: Path, directory: Path) -> dict:
    metrics, env = read_json(directory / METRICS), read_json(directory / ENV)
    row = {**parse_cell_directory(root, directory), "path": str(directory)}
    if metrics:
        row["status"] = metrics.get("status", "complete")
        error = directory / ERROR
        if error.exists() and error.stat().st_mtime > (directory / METRICS).stat().st_mtime:
            row["status"] = "failed"
    else:
        row["status"] = "failed" if (directory / ERROR).exists() else "running"
        row["examples"] = len(read_records(directory / SAMPLES))
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
    for key in ("dtype", "torch_threads", "seed"):
        row.setdefault(key, env.get(key))
    # the machine with its instruction sets, which decide its rounding (a cell's tokens depend on them)
    # (metrics.json's "machine" is the bare name)
    if env:
        row["machine"] = recorded_machine_name(env)
    row.setdefault("machine", None)
    row["target_dtype"], row["draft_dtype"] = model_dtypes(cell.get("pair") or {}, row.get("dtype"))
    row["devices"] = ",".join(env.get("devices", [])) or None
    git = env.get("git") or {}
    row["git_commit"], row["git_dirty"], row["git_diff_sha256"] = (
        git.get("commit"),
        git.get("dirty"),
        git.get("diff_sha256"),
    )
    row["provenance"] = cell_provenance(env)
    return row


def check_override_set(cells: pd.DataFrame, experiment: str, overrides: str | None) -> None:
    """Refuse, naming the override sets there are and the option that picks one, an ``overrides``
    ("" = the base cells; None = any single set) that none of the experiment's cells carries."""
    in_experiment = cells[cells["experiment"] == experiment] if "experiment" in cells else cells.iloc[0:0]
    if overrides is None or "overrides" not in in_experiment or (in_experiment["overrides"] == overrides).any():
        return
    sets = sorted(set(in_experiment["overrides"]))
    named = ", ".join(s if s else "'' (the base cells)" for s in sets)
    wanted = f"with overrides {overrides!r}" if overrides else "without overrides (base cells)"
    pick = sets[0] or "''"
    raise ValueError(
        f"experiment {experiment!r} has no cells {wanted}: its cells exist with overrides {named}; "
        f"choose one with --overrides {pick}" + (" (or --overrides any)" if len(sets) == 1 else "")
    )


def load_cells(root: str | Path = "results/runs", experiment: str | None = None) -> pd.DataFrame:
    """One row per cell under ``root`` (optionally one experiment); columns in the module doc."""
    root = Path(root)
    base = root / experiment if experiment else root
    rows = [cell_row(root, d) for d in find_cells(base)] if base.exists() else []
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=IDENTITY + ["path", "status"])
    return df.sort_values(IDENTITY, kind="stable").reset_index(drop=True)
