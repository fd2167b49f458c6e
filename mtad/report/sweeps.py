"""The data behind the figures: planned grids (from conf/), Table 2 and sweep frames with
missing cells kept as rows, and the caption line naming pair, machine, dtype and counts.

    from mtad.report.cells import load_cells
    from mtad.report.sweeps import sweep_frame, table2_frame
    cells = load_cells("results/runs")
    table2_frame(cells)                   # one row per planned (task, method), `missing` flag
    sweep_frame(cells, "gamma")           # one row per planned (method, gamma), speed-ups added

A planned cell is one the experiment's (and sweep's) Hydra grid names; a planned cell without a
finished metrics.json is a row with ``missing=True`` and its ``status`` ("not run", "running",
"failed"), never dropped. Speed-ups are tokens/s over the base ``sampling``/``sps`` cell (no
overrides) of the same experiment, pair, task and machine.
"""

from __future__ import annotations

import math
from itertools import product
from pathlib import Path

import pandas as pd

from mtad.configs import planned_grid
from mtad.decode_stats import EXACT_RATIOS
from mtad.decoding.registry import BASELINES, REFERENCE, VANILLA, study_methods
from mtad.markdown import fmt_count_range, fmt_set
from mtad.report.cells import check_override_set
from mtad.report.roots import default_runs, require_cells
from mtad.report.tables import TASK_ORDER, matching_values, table2
from mtad.report.values import in_order, present

# sweep name (conf/sweep/<name>.yaml) -> the method parameter it varies
SWEEP_PARAMS = {
    "gamma": "gamma",
    "beam_width": "beam_width",
    "threshold": "threshold",
    "stop_below": "stop_below",
    "temperature": "temperature",
}
METRIC_COLUMNS = (
    "tokens_per_s",
    "speedup_vs_sampling",
    "speedup_vs_sps",
    *EXACT_RATIOS,
    "perplexity",
    "score",
    "examples",
    "samples",
)


def runs_dir() -> Path:
    """The runs folder a notebook reads: ``$MTAD_RESULTS`` (a results root or its runs folder; a
    relative one from the repository root, not the notebook's folder), else the committed
    ``results/runs``. Raises ``NoResults`` naming the folder looked at and the command that fills
    it when it holds no cell, rather than showing an empty table."""
    runs, named_by = default_runs()
    return require_cells(runs, named_by)


def _choose(df: pd.DataFrame, column: str, wanted: str | None, what: str) -> str:
    found = present(df[column]) if column in df else []
    if wanted is not None:
        return wanted
    if len(found) != 1:
        raise ValueError(f"{what} has cells of several {column}s {found}; choose one with {column}=...")
    return found[0]


# ----------------------------------------------------------------------------- Table 2
def table2_frame(
    cells: pd.DataFrame,
    experiment: str = "table2",
    pair: str | None = None,
    tasks: list[str] | None = None,
    methods: list[str] | None = None,
    overrides: str | None = "",
) -> pd.DataFrame:
    """Table 2's rows (``mtad.report.tables.table2``) of the cells with these ``overrides`` ("" =
    the base cells; None = whatever single override set the cells have) plus one ``missing`` row
    per planned (task, method) that has no finished cell. Tasks/methods default to the
    experiment's grid in conf/ joined with whatever the cells hold."""
    grid = planned_grid(experiment)
    in_experiment = cells[cells["experiment"] == experiment] if "experiment" in cells else cells.iloc[0:0]
    if in_experiment.empty and not grid:
        raise ValueError(
            f"no cells of experiment {experiment!r} and no conf/experiment/{experiment}.yaml; "
            f"found experiments: {present(cells.get('experiment', []))}"
        )
    check_override_set(in_experiment, experiment, overrides)
    if overrides is not None and "overrides" in in_experiment:
        in_experiment = in_experiment[in_experiment["overrides"] == overrides]
    tasks = tasks or in_order(set(grid.get("task", [])) | set(in_experiment.get("task", [])), TASK_ORDER)
    methods = methods or in_order(set(grid.get("method", [])) | set(in_experiment.get("method", [])), study_methods())
    finished = (
        in_experiment[in_experiment["status"].isin(["complete", "incomplete"])]
        if "status" in in_experiment
        else in_experiment
    )
    rows = table2(finished, experiment, pair, overrides) if not finished.empty else pd.DataFrame()
    status = {(r.task, r.method): r.status for r in in_experiment.itertuples()}
    frame = pd.DataFrame(list(product(tasks, methods)), columns=["task", "method"])
    frame = frame.merge(rows, on=["task", "method"], how="left") if not rows.empty else frame
    frame["missing"] = frame["tokens_per_s"].isna() if "tokens_per_s" in frame else True
    frame["status"] = [
        s if not m else status.get((t, me), "not run")
        for t, me, m, s in zip(
            frame["task"], frame["method"], frame["missing"], frame.get("status", [None] * len(frame))
        )
    ]
    frame["experiment"] = experiment
    return frame


# ----------------------------------------------------------------------------- sweeps
FINISHED = ("complete", "incomplete")


def without_key(overrides: str, key: str) -> str:
    """The overrides string without ``key=...``: the context a swept cell was run in."""
    return ",".join(part for part in overrides.split(",") if part and part.split("=", 1)[0] != key)


def _baselines(cells: pd.DataFrame, context: str) -> pd.DataFrame:
    if "status" not in cells or "tokens_per_s" not in cells:
        return cells.iloc[0:0]
    return cells[cells["method"].isin(BASELINES) & (cells["overrides"] == context) & cells["status"].isin(FINISHED)]


def add_baseline_speedups(df: pd.DataFrame, cells: pd.DataFrame, context: str = "") -> pd.DataFrame:
    """speedup_vs_<baseline>: tokens/s over the finished ``baseline`` cell run with the overrides
    ``context`` ("" = none) in the same experiment, pair, task and machine; NaN when it is missing.
    Also ``sampling_perplexity``, the reference quality."""
    df = df.copy()
    keys = ["experiment", "pair", "task", "machine"]
    base_cells = _baselines(cells, context)
    for baseline, column, target in (
        (REFERENCE, "tokens_per_s", f"{REFERENCE}_tokens_per_s"),
        (VANILLA, "tokens_per_s", f"{VANILLA}_tokens_per_s"),
        (REFERENCE, "perplexity", f"{REFERENCE}_perplexity"),
    ):
        df[target] = matching_values(df, base_cells[base_cells["method"] == baseline], keys, column)
    for baseline in BASELINES:
        tokens_per_s = df["tokens_per_s"].astype(float).values if "tokens_per_s" in df else float("nan")
        df[f"speedup_vs_{baseline}"] = tokens_per_s / df[f"{baseline}_tokens_per_s"].values
    return df


def sweep_context(df: pd.DataFrame, key: str, context: str | None) -> str:
    """The other overrides the swept cells share ("" for a plain ``make sweep-*``)."""
    if context is not None:
        return context
    found = sorted(
        {without_key(o, key) for o in df["overrides"] if any(part.split("=", 1)[0] == key for part in o.split(","))}
    )
    if len(found) > 1 and "" not in found:
        raise ValueError(
            f"cells swept over {key} were run with different other overrides {found}; choose one with context=..."
        )
    return found[0] if len(found) == 1 else ""


def sweep_frame(
    cells: pd.DataFrame,
    sweep: str,
    experiment: str = "sweeps",
    pair: str | None = None,
    task: str | None = None,
    methods: list[str] | None = None,
    values: list | None = None,
    context: str | None = None,
) -> pd.DataFrame:
    """One row per planned (method, value) of ``conf/sweep/<sweep>.yaml`` under ``experiment``:
    the cell's metrics, ``value`` (the swept parameter), speed-ups over the sampling/SpS cells
    and ``missing``. Cells count when their overrides are ``context`` (the other overrides they
    share, default: found from the cells) plus the swept key; a method's cell without the swept
    key counts at its default value, and a swept cell at the same value wins over it."""
    if sweep not in SWEEP_PARAMS:
        raise ValueError(f"unknown sweep {sweep!r}; valid: {sorted(SWEEP_PARAMS)}")
    param = SWEEP_PARAMS[sweep]
    key, column = f"method.{param}", f"param.{param}"
    grid = planned_grid(experiment, sweep)
    methods = list(methods or grid.get("method") or [])
    values = list(values or grid.get(key) or [])
    df = cells[cells["experiment"] == experiment] if "experiment" in cells else cells.iloc[0:0]
    if df.empty and not (methods and values):
        raise ValueError(
            f"no cells of experiment {experiment!r} and no grid for sweep {sweep!r} in "
            f"conf/experiment/{experiment}.yaml + conf/sweep/{sweep}.yaml"
        )
    swept = df
    if not df.empty:
        pair = _choose(df, "pair", pair, f"experiment {experiment!r}")
        task = _choose(df[df["pair"] == pair], "task", task, f"experiment {experiment!r}")
        df = df[(df["pair"] == pair) & (df["task"] == task)]
        context = sweep_context(df[df["method"].isin(methods)], key, context)
        df = add_baseline_speedups(df, df, context)
        in_context = [m in methods and without_key(o, key) == context for m, o in zip(df["method"], df["overrides"])]
        swept = df[pd.Series(in_context, index=df.index, dtype=bool)]
    if column in swept and len(swept):
        swept = swept.assign(value=swept[column], _plain=swept["overrides"] == context)
        swept = swept.sort_values("_plain", kind="stable").drop_duplicates(["method", "value"]).drop(columns="_plain")
        values = sorted(set(values) | set(swept["value"].dropna()))
    planned = pd.DataFrame(list(product(methods, values)), columns=["method", "value"])
    frame = planned.merge(swept, on=["method", "value"], how="left") if "value" in swept else planned
    finished = frame["status"].isin(FINISHED) if "status" in frame else pd.Series(False, index=frame.index)
    frame["missing"] = ~finished | (frame["tokens_per_s"].isna() if "tokens_per_s" in frame else True)
    frame["status"] = [s if isinstance(s, str) else "not run" for s in frame.get("status", [None] * len(frame))]
    for column_name in METRIC_COLUMNS:  # present even when no planned cell has finished
        if column_name not in frame:
            frame[column_name] = math.nan
    frame["sweep"], frame["param"], frame["experiment"] = sweep, param, experiment
    frame["pair"], frame["task"], frame["context"] = pair, task, context or ""
    return same_value_baseline(frame) if swept_baseline(frame) else frame


def swept_baseline(frame: pd.DataFrame) -> bool:
    """Whether sampling is among the swept methods: the swept setting (a temperature) changes the
    baseline too, so each value's speed-up is over sampling at that value, not at its default."""
    return bool((frame["method"] == REFERENCE).any())


def same_value_baseline(frame: pd.DataFrame) -> pd.DataFrame:
    """speedup_vs_sampling and sampling_perplexity from the sweep's own sampling row at each value."""
    sampling = frame[(frame["method"] == REFERENCE) & ~frame["missing"]].set_index("value")
    tokens_per_s = frame["value"].map(sampling["tokens_per_s"].astype(float))
    return frame.assign(
        speedup_vs_sampling=frame["tokens_per_s"].astype(float) / tokens_per_s,
        sampling_tokens_per_s=tokens_per_s,
        sampling_perplexity=frame["value"].map(sampling["perplexity"]),
    )


def baseline_cells(cells: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The sampling/SpS cells a sweep frame's speed-ups and reference lines come from."""
    if frame.empty or "experiment" not in cells or not isinstance(frame["pair"].iloc[0], str):
        return cells.iloc[0:0]
    first = frame.iloc[0]
    same = cells[
        (cells["experiment"] == first["experiment"])
        & (cells["pair"] == first["pair"])
        & (cells["task"] == first["task"])
    ]
    return _baselines(same, first["context"])


# ----------------------------------------------------------------------------- caption
def caption(frame: pd.DataFrame, cells: pd.DataFrame | None = None) -> str:
    """``pair … · machine … · dtype … · <task>: N examples (M samples) per cell, ≤T new tokens ·
    k of n planned cells (j missing)`` from the rows of a table2/sweep frame (and its cells)."""
    present = frame[~frame["missing"]]
    source = pd.concat([present, cells]) if cells is not None and not cells.empty else present
    parts = [
        f"pair {fmt_set(source.get('pair', []))}",
        f"machine {fmt_set(source.get('machine', []))}",
        _dtypes(source),
    ]
    for task, group in source.groupby("task", sort=False) if "task" in source else []:
        examples = fmt_count_range(group.get("examples"))
        samples = fmt_count_range(group.get("samples"))
        limit = fmt_count_range(group.get("max_new_tokens"))
        parts.append(f"{task}: {examples} examples ({samples} samples) per cell, ≤{limit} new tokens")
    n_missing = int(frame["missing"].sum())
    parts.append(
        f"{len(frame) - n_missing} of {len(frame)} planned cells" + (f" ({n_missing} missing)" if n_missing else "")
    )
    return " · ".join(parts)


def _dtypes(source: pd.DataFrame) -> str:
    """``target float32, draft bfloat16`` when the cells say which model ran in which, else the
    dtypes they ran in."""
    target, draft = (source.get(f"{m}_dtype", pd.Series(dtype=object)).dropna() for m in ("target", "draft"))
    if len(target) and len(draft):
        return f"target {fmt_set(target)}, draft {fmt_set(draft)}"
    return f"dtype {fmt_set(source.get('dtype', []))}"
