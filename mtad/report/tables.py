"""Table 2 from the cells of one experiment: quality, speed and energy per (task, method).

Speed-ups are computed here, never stored in a cell: a method's tokens/s over the
``sampling`` (and the ``sps``) cell of the same experiment, pair, task and machine, i.e.
the same prompts, settings and hardware measured in the same sweep.

Beside the fixed rows, the written table has an adaptive row per task for each lossless method
with an adaptive threshold (its ``MethodSpec.adaptive_stop``): its cell
``<method>/method.stop_below=<t>`` (the experiment runs it beside its grid), after the task's
fixed rows, its speed-ups over the fixed baseline cells (``variant`` names it).

    from mtad.report.tables import table2, write_table2
    df = table2(load_cells("results/runs"), experiment="table2")
    write_table2(df, "results/tables")   # table2.md (with a header) and table2.csv
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from mtad.configs import planned_beside_grid, planned_grid
from mtad.decode_stats import EXACT_RATIOS
from mtad.decoding.registry import BASELINES, spec, specs, study_methods
from mtad.markdown import MISSING, fmt_count_range, fmt_number, fmt_ratio, fmt_set, is_absent, md_table, with_bounds
from mtad.metrics.acceptance_terms import ACCEPTANCE_TERMS, terms_markdown
from mtad.metrics.cost_model import (
    ACCELERATORS,
    COUNT_FIELDS,
    DEFAULT_ACCELERATOR,
    PAIR_SIZES,
    Counts,
    accelerator_profile,
    modelled_tokens_per_s,
)
from mtad.records import write_if_changed
from mtad.report.cells import load_cells
from mtad.report.reproduce import recorded_machine
from mtad.report.values import in_order
from mtad.runner.layout import override_dirname
from mtad.tasks import TASKS

ACCELERATOR = ACCELERATORS[DEFAULT_ACCELERATOR]
ACCELERATOR_LABEL = ACCELERATOR.name.removeprefix("NVIDIA ")
MODELLED_ON = f"block eff. and draft cost on an {ACCELERATOR_LABEL} roofline"  # what a modelled column depends on
TASK_ORDER = list(TASKS)
COLUMNS = [
    "task",
    "method",
    "score_name",
    "score",
    "perplexity",
    "tokens_per_s",
    "speedup_vs_sampling",
    "speedup_vs_sps",
    "modelled_vs_sampling",
    "modelled_vs_sps",
    *EXACT_RATIOS,
    "energy_j_per_token",
    "examples",
    "samples",
    "generations",
    "new_tokens",
    "max_new_tokens",
    "status",
    "machine",
    "dtype",
    "pair",
    "seed",
    "energy_missing_reason",
    "score_missing_reason",
    "missing_reason",
    "incomplete_reason",
    "provenance",
    "variant",  # "" for a fixed row; an adaptive row's setting, e.g. "adaptive, stop_below 0.3"
]
HEADERS = {
    "score_name": "score",
    "score": "value",
    "perplexity": "PPL",
    "tokens_per_s": "tokens/s",
    "speedup_vs_sampling": "speed-up vs sampling",
    "speedup_vs_sps": "speed-up vs SpS",
    "modelled_vs_sampling": f"modelled vs sampling ({MODELLED_ON})",
    "modelled_vs_sps": f"modelled vs SpS ({MODELLED_ON})",
    "block_efficiency": ACCEPTANCE_TERMS["block_efficiency"].label,
    "acceptance_rate": ACCEPTANCE_TERMS["acceptance_rate"].label,
    "mean_accept_length": "mean accepted",
    "energy_j_per_token": "J/token",
    "examples": "examples",
    "samples": "samples",
}
MD_COLUMNS = COLUMNS[: COLUMNS.index("samples") + 1]  # the Markdown table: identity, quality, speed, counts


def matching_values(df: pd.DataFrame, base: pd.DataFrame, keys: list[str], column: str) -> np.ndarray:
    """[len(df)] ``column`` of the row of ``base`` that matches each row of ``df`` on ``keys`` (the
    first with a value; NaN where none), in ``df``'s row order (positional: ``df`` may keep a
    filtered index)."""
    if len(base):
        base = base[keys + [column]].dropna().drop_duplicates(keys)
    else:
        base = pd.DataFrame(columns=keys + [column])
    merged = df[keys].merge(base.rename(columns={column: "_base"}), on=keys, how="left")
    return merged["_base"].astype(float).to_numpy()


def add_speedups(cells: pd.DataFrame) -> pd.DataFrame:
    """speedup_vs_<baseline> = tokens/s over the baseline cell's, same experiment/pair/task/machine."""
    df = cells.copy()
    keys = ["experiment", "pair", "task", "machine", "overrides"]
    for baseline in BASELINES:
        base_speed = matching_values(df, df[(df["method"] == baseline) & fixed_rows(df)], keys, "tokens_per_s")
        df[f"speedup_vs_{baseline}"] = df["tokens_per_s"].astype(float).to_numpy() / base_speed
    return df


def fixed_rows(df: pd.DataFrame) -> pd.Series:
    """[len(df)] True for a method's row at its fixed settings, False for a variant row (an adaptive
    row of Table 2, ``variant`` set): the rows a speed-up may divide by."""
    if "variant" not in df:
        return pd.Series(True, index=df.index)
    return df["variant"].fillna("").eq("")


def _counts(row: dict) -> Counts | None:
    """The cost model's counts of a cell row (its metrics.json totals), None without target calls."""
    if any(pd.isna(row.get(c)) for c in ("new_tokens", "target_calls")) or not row.get("target_calls"):
        return None
    return Counts.of(row)


def modelled_ratio(pair: str, mine: Counts, *baselines: Counts, accelerator: str = DEFAULT_ACCELERATOR) -> float | None:
    """Modelled tokens/s of ``mine`` over the fastest of ``baselines`` on a memory-bound ``accelerator``
    (``mtad.metrics.cost_model``); None for a pair without parameter counts. Modelled, never measured."""
    if pair not in PAIR_SIZES:
        return None
    profile = accelerator_profile(pair, accelerator)
    first, *others = (modelled_tokens_per_s(c, profile) for c in (mine, *baselines))
    return first / max(others)


def add_modelled_speedups(cells: pd.DataFrame, accelerator: str = DEFAULT_ACCELERATOR) -> pd.DataFrame:
    """modelled_vs_<baseline>: the speed-up each cell's counts give over the baseline cell's
    (``modelled_ratio``), for pairs with known parameter counts (NaN for other pairs or cells
    without counts)."""
    df = cells.copy()
    keys = ["experiment", "pair", "task", "machine", "overrides"]
    columns = [c for c in COUNT_FIELDS if c in df]
    for baseline in BASELINES:
        base = df[(df["method"] == baseline) & fixed_rows(df)]
        matched = {c: matching_values(df, base, keys, c) for c in columns if c in base}
        values = []
        for i, row in enumerate(df.to_dict("records")):
            mine, theirs = _counts(row), _counts({c: v[i] for c, v in matched.items()})
            ratio = modelled_ratio(row.get("pair"), mine, theirs, accelerator=accelerator) if mine and theirs else None
            values.append(float("nan") if ratio is None else ratio)
        df[f"modelled_vs_{baseline}"] = values
    return df


def table2(
    cells: pd.DataFrame,
    experiment: str = "table2",
    pair: str | None = None,
    overrides: str | None = "",
    adaptive: bool = False,
) -> pd.DataFrame:
    """One row per (task, method) of the experiment's cells with these ``overrides``
    ("" = the base cells; None = whatever single override set the cells have); ``adaptive`` (with
    the base cells): each task's adaptive rows after its fixed ones (``adaptive_cells``)."""
    df = _selected(cells, experiment, pair, overrides).assign(variant="")
    if adaptive and overrides == "":
        df = pd.concat([df, adaptive_cells(cells, experiment, df["pair"].iloc[0])], ignore_index=True)
    if "tokens_per_s" not in df:
        if not (df["status"] == "missing").all():
            raise ValueError(f"no finished cell in experiment {experiment!r} (no metrics.json yet)")
        df = df.assign(tokens_per_s=float("nan"))  # every cell's data is missing: a table of reasons
    df = add_modelled_speedups(add_speedups(df))
    df["task"] = pd.Categorical(df["task"], in_order(set(df["task"]), TASK_ORDER), ordered=True)
    df["method"] = pd.Categorical(df["method"], in_order(set(df["method"]), study_methods()), ordered=True)
    df["fixed"] = fixed_rows(df)
    df = df.sort_values(["task", "fixed", "method"], ascending=[True, False, True]).reset_index(drop=True)
    for column in COLUMNS:
        if column not in df:
            df[column] = None
    reasons = [c for c in df.columns if c.startswith("score.") and c.endswith("missing_reason")]
    df["score_missing_reason"] = df[reasons].bfill(axis=1).iloc[:, 0] if reasons else None
    df["task"], df["method"] = df["task"].astype(str), df["method"].astype(str)
    table = add_intervals(df)[COLUMNS + INTERVAL_BOUNDS]
    table.attrs["timing"] = timing(df)  # the header's, kept out of the columns (and the CSV)
    table.attrs["machines"] = recorded_machines(df)
    return table


def _selected(cells: pd.DataFrame, experiment: str, pair: str | None, overrides: str | None) -> pd.DataFrame:
    """The experiment's cells with these ``overrides`` (None: its one override set), of one pair;
    refused, naming what there is, when that leaves none or several pairs."""
    df = cells[cells["experiment"] == experiment]
    if overrides is not None:
        df = df[df["overrides"] == overrides]
    elif df.duplicated(["pair", "task", "method"]).any():
        raise ValueError(f"experiment {experiment!r} has several override sets per cell; choose one")
    if pair is not None:
        df = df[df["pair"] == pair]
    if df.empty:
        raise ValueError(
            f"no cells of experiment {experiment!r}"
            + (f" and pair {pair!r}" if pair else "")
            + f"; found experiments: {sorted(set(cells['experiment']))}"
        )
    pairs = sorted(set(df["pair"]))
    if len(pairs) > 1:
        raise ValueError(f"experiment {experiment!r} has several pairs {pairs}; choose one with pair=...")
    return df


def adaptive_overrides() -> dict[str, str]:
    """Each lossless method with an adaptive threshold -> its adaptive cell's override
    (``method.stop_below=<adaptive_stop>``, from the method registry): Table 2's adaptive rows."""
    return {name: s.adaptive_override for name, s in specs().items() if s.lossless and s.adaptive_stop is not None}


def adaptive_cells(cells: pd.DataFrame, experiment: str, pair: str) -> pd.DataFrame:
    """The experiment's adaptive cells of ``pair`` (``adaptive_overrides``), each with its ``variant``
    label and its overrides cleared, so that its speed-ups divide by the fixed baseline cells'."""
    wanted = adaptive_overrides()
    mine = (cells["experiment"] == experiment) & (cells["pair"] == pair)
    df = cells[mine & (cells["overrides"] == cells["method"].map(wanted))]
    return df.assign(variant=[f"adaptive, stop_below {spec(m).adaptive_stop:g}" for m in df["method"]], overrides="")


def recorded_machines(cells: pd.DataFrame) -> str | None:
    """The machines the cells ran on as their env.json records name them, instruction sets and
    target dtype included (``reproduce.recorded_machine``); None without cell folders to read."""
    ran = cells[cells["status"] != "missing"] if "status" in cells else cells
    paths = [p for p in ran.get("path", []) if isinstance(p, str)]
    return "; ".join(dict.fromkeys(recorded_machine(Path(p)) for p in paths)) or None


class ProvenanceError(ValueError):
    """The cells were not all written by one clean commit."""


def provenance(cells: pd.DataFrame, allow_mixed: bool = False) -> str:
    """The code state the cells came from, for the table's header: ``commit <sha>``.

    A reference table must come from one commit with a clean tree: cells written by
    several commits, by a dirty tree, or without a recorded commit are refused with the
    cells named, unless ``allow_mixed`` (then the header lists every state it mixes).
    Cells that never generated (``missing`` data) carry no code state and are not counted.
    """
    ran = cells[cells["status"] != "missing"] if "status" in cells else cells
    by_state: dict[str, list[str]] = {}
    for row in ran.itertuples(index=False):
        states = getattr(row, "provenance", None)
        states = states if isinstance(states, str) and states else "unknown"
        for state in states.split(" + "):
            overrides = getattr(row, "overrides", "")
            by_state.setdefault(state, []).append(_row_name(row) + (f"/{overrides}" if overrides else ""))
    clean = [s for s in by_state if s != "unknown" and "+dirty" not in s]
    if len(by_state) == 1 and clean:
        return f"commit {clean[0]} (clean tree)"
    described = "; ".join(
        f"{state}: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
        for state, names in sorted(by_state.items())
    )
    if not allow_mixed:
        raise ProvenanceError(
            "the cells do not come from one commit with a clean tree, so the table would not describe "
            f"any version of the code ({described}). Rerun them from one clean commit, or pass "
            "--allow-mixed-provenance (make table TABLE_ARGS=--allow-mixed-provenance) to build it anyway "
            "with every code state listed in its header"
        )
    return f"MIXED code states, built with --allow-mixed-provenance: {described}"


def _fmt(value, column: str) -> str:
    """Table 2's cell of ``column``: speed-ups as ratios, J/token to three figures (``missing``
    where no counter was read), other figures to three decimals (one from 100 on)."""
    if is_absent(value):
        return "missing" if column == "energy_j_per_token" else MISSING
    if not isinstance(value, float):
        return str(value)
    if column.startswith(("speedup", "modelled")):
        return fmt_ratio(value)
    if column == "energy_j_per_token":
        return fmt_number(value, "{:.3g}")
    return fmt_number(value, "{:.3f}" if abs(value) < 100 else "{:.1f}")


def _reasons(df: pd.DataFrame, column: str) -> str:
    by_task = {}
    for row in df.itertuples(index=False):
        reason = getattr(row, column)
        if isinstance(reason, str) and reason:
            by_task.setdefault(reason, []).append(row.task)
    return "; ".join(f"{', '.join(sorted(set(tasks)))}: {reason}" for reason, tasks in by_task.items())


INTERLEAVED = "interleaved: every method on a prompt before the next prompt"
ONE_AFTER_ANOTHER = (
    "one after another, not interleaved (each cell whole before the next; the claims run interleaves the"
    " methods within each prompt)"
)
MODELLED_NOTE = (
    f"modelled ({MODELLED_ON}): not a measurement of an {ACCELERATOR_LABEL}. The cell's block efficiency (tokens"
    " per target call) and its draft calls' cost relative to the target's, priced on the"
    f" {ACCELERATOR_LABEL}'s roofline (datasheet bandwidth and bf16 peak, the pair's parameter counts) with an"
    f" assumed overhead of {ACCELERATOR.layer_overhead_ms * 1e3:g} µs per layer per forward, over the baseline"
    " cell's priced the same way (mtad/metrics/cost_model.py); modelled, never measured"
)


def timing(cells: pd.DataFrame) -> str:
    """How the cells' methods were timed: interleaved within each prompt where the cells record a
    schedule (``timing`` in the interleaved runner's metrics.json), else one cell after another."""
    return INTERLEAVED if "timing" in cells and cells["timing"].notna().any() else ONE_AFTER_ANOTHER


def to_markdown(
    df: pd.DataFrame, experiment: str, notes: list[str] = (), source: str = "results/runs", code: str | None = None
) -> str:
    counts = "; ".join(
        f"{task}: {fmt_count_range(g['examples'])} examples, {fmt_count_range(g['samples'])} samples, "
        f"{fmt_count_range(g['generations'])} generations of ≤{_fmt(g['max_new_tokens'].iloc[0], 'm')} new tokens"
        for task, g in df.groupby("task", sort=False)
    )
    lines = [
        f"# Table 2 — experiment `{experiment}`",
        "",
        *([f"- code: {code}"] if code else []),
        f"- machine: {df.attrs.get('machines') or fmt_set(df['machine'])}",
        f"- dtype: {fmt_set(df['dtype'])}",
        f"- pair: {fmt_set(df['pair'])}",
        f"- seed: {fmt_set(df['seed'])}",
        f"- sample counts per cell: {counts}",
        "- speed-up: tokens/s over the `sampling` (resp. `sps`) cell of the same task, pair and machine, the"
        f" cells timed {df.attrs.get('timing') or timing(df)}; J/token `missing` where no energy counter was readable",
        f"- {MODELLED_NOTE}",
        f"- {INTERVAL_NOTE}",
        f"- built: {datetime.now(timezone.utc).isoformat(timespec='seconds')} from {source}/{experiment}",
        *[f"- {note}" for note in notes],
    ]
    if _reasons(df, "energy_missing_reason"):
        lines.append(f"- energy missing: {_reasons(df, 'energy_missing_reason')}")
    if _reasons(df, "score_missing_reason"):
        lines.append(f"- score missing: {_reasons(df, 'score_missing_reason')}")
    if _reasons(df, "missing_reason"):
        lines.append(f"- **data missing** (rows marked `missing`): {_reasons(df, 'missing_reason')}")
    if _reasons(df, "incomplete_reason"):
        lines.append(f"- **incomplete:** {_reasons(df, 'incomplete_reason')}")
    lines.append("")
    incomplete = df[df["status"] != "complete"]
    if not incomplete.empty:
        lines += [
            "- **not complete:** " + ", ".join(f"{_row_name(r)} ({r.status})" for r in incomplete.itertuples()),
            "",
        ]
    lines += md_table([HEADERS.get(c, c) for c in MD_COLUMNS], map(_md_row, df.itertuples(index=False)))
    lines += ["", *terms_markdown(("block_efficiency", "acceptance_rate"))]
    return "\n".join(lines) + "\n"


def _row_name(row) -> str:
    """``task/method``, an adaptive row's setting after it."""
    variant = getattr(row, "variant", None)
    return f"{row.task}/{row.method}" + (f" ({variant})" if isinstance(variant, str) and variant else "")


def _md_row(row) -> list[str]:
    """A row's cells, each figure with its interval (an adaptive row's method with its setting);
    ``missing`` past its identity where the data was absent."""
    cells = [_fmt_with_interval(row, c) for c in MD_COLUMNS]
    if isinstance(row.variant, str) and row.variant:
        cells[1] = f"{row.method} ({row.variant})"
    return cells[:2] + ["missing"] * (len(cells) - 2) if row.status == "missing" else cells


def write_table2(
    df: pd.DataFrame,
    out_dir: str | Path,
    experiment: str = "table2",
    name: str = "table2",
    notes: list[str] = (),
    source: str = "results/runs",
    code: str | None = None,
) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv = out_dir / f"{name}.md", out_dir / f"{name}.csv"
    write_if_changed(md, to_markdown(df, experiment, notes, source, code))
    # 12 significant digits: a machine's last-bit rounding of a derived figure (a bootstrap bound)
    # must not rewrite a committed table that nothing it reads has changed
    write_if_changed(csv, df.to_csv(index=False, float_format="%.12g"))
    return md, csv


def build_table2(
    results_root: str | Path = "results/runs",
    out_dir: str | Path = "results/tables",
    experiment: str = "table2",
    pair: str | None = None,
    name: str | None = None,
    overrides: str | None = "",
    allow_mixed_provenance: bool = False,
) -> tuple[Path, Path]:
    """Write the table (.md, .csv); refuses cells of mixed or dirty code states (``provenance``)."""
    cells = load_cells(results_root, experiment=experiment)
    if cells.empty:
        root = Path(results_root)
        found = (
            sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
        )
        raise ValueError(f"no cells of experiment {experiment!r} under {root}; experiments there: {found or 'none'}")
    if overrides == "" and not (cells["overrides"] == "").any():
        sets = sorted(set(cells["overrides"]))
        raise ValueError(
            f"experiment {experiment!r} has only cells under override folders ({', '.join(sets)}); "
            "pass --overrides '<one of them>' or --overrides any"
        )
    df = table2(cells, experiment=experiment, pair=pair, overrides=overrides, adaptive=overrides == "")
    code = provenance(df, allow_mixed=allow_mixed_provenance)
    stem = name or (experiment if experiment.startswith("table2") else f"table2_{experiment}")
    notes = coverage_notes(df, experiment, results_root) + adaptive_notes(df, experiment)
    notes += mixed_conditions_notes(cells[cells["path"].isin(df["path"])] if "path" in df else cells)
    return write_table2(df, out_dir, experiment=experiment, name=stem, notes=notes, source=str(results_root), code=code)


def coverage_notes(df: pd.DataFrame, experiment: str, results_root) -> list[str]:
    """The cells the experiment's grid plans (conf/experiment/<experiment>.yaml: task x method), how
    many are here and which are missing (none when the experiment declares no such grid)."""
    grid = planned_grid(experiment)
    if not {"task", "method"} <= set(grid):
        return []
    fixed = df[fixed_rows(df)]
    present = set(zip(fixed["task"], fixed["method"]))
    planned = [(t, m) for t in grid["task"] for m in grid["method"]]
    missing = [f"{t}/{m}" for t, m in planned if (t, m) not in present]
    line = f"cells: {len(planned)} planned, {len(planned) - len(missing)} present, {len(missing)} missing"
    return [line + (f" from {Path(results_root) / experiment}: {', '.join(missing)}" if missing else "")]


def adaptive_notes(df: pd.DataFrame, experiment: str) -> list[str]:
    """One line on the adaptive rows: each lossless method's threshold, how many of its cells the
    table shows and which are absent (a row per task of the fixed rows, for each method the
    experiment runs beside its grid, ``beside_grid``); none when it runs none and the table has none."""
    wanted = adaptive_overrides()
    beside = {
        (override_dirname(entry), *(e for e in entry if e.startswith("method=")))
        for entry in planned_beside_grid(experiment)
    }
    planned = [m for m, override in wanted.items() if (override, f"method={m}") in beside]
    shown = df[~fixed_rows(df)]
    if shown.empty and not planned:
        return []
    methods = planned or list(dict.fromkeys(shown["method"]))
    tasks = list(dict.fromkeys(df.loc[fixed_rows(df), "task"]))
    absent = [f"{t}/{m}" for t in tasks for m in methods if not ((shown["task"] == t) & (shown["method"] == m)).any()]
    head = "adaptive rows (" + ", ".join(f"{m} stop_below {spec(m).adaptive_stop:g}" for m in methods)
    head += (
        ": each lossless method at its `adaptive_stop`, after each task's fixed rows, speed-ups over the fixed cells)"
    )
    if shown.empty:
        where = f"no `<method>/method.stop_below=<t>` cell has run; `mtad-run experiment={experiment}` runs them"
        return [f"{head}: none, {where} beside the grid"]
    present = f"{len(shown)} of {len(shown) + len(absent)} present"
    return [f"{head}: {present}" + (f"; absent: {', '.join(absent)}" if absent else "")]


def mixed_conditions_notes(cells: pd.DataFrame) -> list[str]:
    """A note naming the cells whose records ran under several conditions (a resume with other
    threads, dtype, machine or code): their tokens/s blends the runs (per run in metrics.json)."""
    if "conditions" not in cells:
        return []
    mixed = cells[cells["conditions"] == "mixed"]
    if mixed.empty:
        return []
    names = ", ".join(f"{r.task}/{r.method}" for r in mixed.itertuples(index=False))
    return [
        f"**mixed conditions** ({names}): their records ran under more than one set of threads, dtype, machine "
        "or code; tokens/s blends the runs (`tokens_per_s_by_run` in each metrics.json)"
    ]


# ----------------------------------------------------------------------------- intervals
# Each quality and speed column gets a 95% paired bootstrap interval over the cell's examples
# (mtad.stats.intervals); a speed-up pairs the cell's examples with the baseline cell's by id.
INTERVAL_COLUMNS = ["score", "perplexity", "tokens_per_s", "speedup_vs_sampling", "speedup_vs_sps", "block_efficiency"]
INTERVAL_BOUNDS = [f"{c}_{end}" for c in INTERVAL_COLUMNS for end in ("low", "high")]
INTERVAL_RESAMPLES = 2000
INTERVAL_NOTE = (
    "[low, high]: 95% bootstrap interval over the cell's examples (BCa; speed-ups paired by example with "
    "the baseline cell); none below 3 examples"
)


def cell_intervals(examples: pd.DataFrame, baselines: dict[str, pd.DataFrame] | None = None) -> dict:
    """{column: Interval} for one cell from its per-example rows (``mtad.report.examples``);
    ``baselines`` maps "sampling"/"sps" to that baseline cell's per-example rows."""
    from mtad.stats import intervals as iv

    def boot(statistic, arrays):
        return iv.bootstrap_interval(statistic, arrays, resamples=INTERVAL_RESAMPLES)

    out = {}
    scored = examples["score"].dropna() if "score" in examples else []
    if len(scored):
        out["score"] = boot(iv.mean, [scored])
    logprobs = examples["mean_logprob"].dropna()
    if len(logprobs):
        out["perplexity"] = boot(iv.perplexity, [logprobs])
    if len(examples):
        out["tokens_per_s"] = boot(iv.rate, [examples["new_tokens"], examples["seconds"]])
        out["block_efficiency"] = boot(iv.rate, [examples["new_tokens"], examples["target_calls"]])
        if examples["drafted"].sum() > 0:
            out["acceptance_rate"] = boot(iv.rate, [examples["accepted"], examples["drafted"]])
    for name, base in (baselines or {}).items():
        columns = ["id", "new_tokens", "seconds"]
        both = examples[columns].merge(base[columns], on="id", how="inner", suffixes=("", "_base")).sort_values("id")
        if len(both):
            out[f"speedup_vs_{name}"] = boot(
                iv.ratio_of_rates, [both["new_tokens"], both["seconds"], both["new_tokens_base"], both["seconds_base"]]
            )
    return out


def add_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """``<column>_low``/``_high`` for each of ``INTERVAL_COLUMNS``, from the cells' samples.jsonl
    (NaN where there is no interval: too few examples, no score, no baseline cell)."""
    from mtad.report.examples import cell_examples

    df = df.copy()
    for bound in INTERVAL_BOUNDS:
        df[bound] = float("nan")
    if "path" not in df:
        return df
    rows = {
        i: cell_examples(row.path, row.score_name if isinstance(row.score_name, str) else None)
        for i, row in zip(df.index, df.itertuples(index=False))
        if isinstance(row.path, str)
    }
    for i, row in zip(df.index, df.itertuples(index=False)):
        if i not in rows:
            continue
        same = df[(df["task"] == row.task) & (df["pair"] == row.pair) & (df["machine"] == row.machine)]
        same = same[fixed_rows(same)]  # a speed-up divides by a fixed row: an adaptive row's by its fixed self too
        baselines = {b: rows[j] for b in BASELINES for j in same.index[same["method"] == b] if j in rows and j != i}
        for column, interval in cell_intervals(rows[i], baselines).items():
            if interval.available:
                df.loc[i, f"{column}_low"], df.loc[i, f"{column}_high"] = interval.low, interval.high
    return df


def _fmt_with_interval(row, column: str) -> str:
    """A row's ``column`` and, for ``INTERVAL_COLUMNS`` that have one, its interval in the same format."""
    text = _fmt(getattr(row, column), column)
    if column not in INTERVAL_COLUMNS:
        return text
    low, high = getattr(row, f"{column}_low", None), getattr(row, f"{column}_high", None)
    return with_bounds(text, low, high, lambda bound: _fmt(float(bound), column))
