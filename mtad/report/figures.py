"""Figures from the cells of ``results/runs`` (matplotlib, Agg canvas, no pyplot state).

One function per figure; each takes the cells DataFrame (``mtad.report.cells.load_cells``)
and returns a ``matplotlib.figure.Figure``; ``save_figure`` writes it as PNG and PDF.

    from mtad.report.cells import load_cells
    from mtad.report import figures
    cells = load_cells("results/runs")
    fig = figures.speedup_bars(cells)                 # Table 2: speed-ups, block efficiency on the bars
    fig = figures.quality_vs_speed(cells)             # Table 2: perplexity / task score vs tokens/s
    fig = figures.gamma_sweep(cells)                  # speed-up, acceptance rate, perplexity vs gamma
    fig = figures.beam_width_sweep(cells)             # the same vs W
    fig = figures.threshold_sweep(cells)              # accepted length, speed-up, perplexity vs tau
    fig = figures.temperature_sweep(cells)            # block efficiency, acceptance, perplexity vs T
    figures.build_all("results/runs", "results/figures")   # every figure, PNG + PDF

Every planned cell (the experiment's Hydra grid in conf/) is drawn: a missing one as a hatched
"missing" slot (bars) or a grey x on the axis (sweeps), never silently left out. Each figure
ends with a caption line naming pair, machine, dtype and sample counts. Table 2's speed-up figure
says in its caption why a bar falls below 1× (``slowdown_notes``: tokens per target call against
a block's time, measured, with the machine's instruction sets and target dtype); its quality
figure leaves out a task's score panel with nothing to show (``empty_score_panels``: every
method scores 0, or none has a score) and names the reason in its caption and in ``build_all``'s
``skipped`` list.
"""

from __future__ import annotations

import functools
import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import ScaledTranslation, blended_transform_factory

from mtad.decoding.registry import BASELINES, REFERENCE, label, specs
from mtad.markdown import fmt_number, fmt_value
from mtad.paper import MMTAD, MTAD
from mtad.report.cells import load_cells
from mtad.report.sweeps import SWEEP_PARAMS, baseline_cells, caption, sweep_frame, swept_baseline, table2_frame
from mtad.report.values import present
from mtad.tasks import TASKS

PARAM_LABELS = {
    "gamma": "draft length γ (tokens)",
    "beam_width": "beam width W (beams)",
    "threshold": "acceptance threshold τ",
    "stop_below": "draft probability that ends drafting (0 = fixed γ)",
    "temperature": "sampling temperature T (0 = greedy)",
}
PARAM_SYMBOLS = {"gamma": "γ", "beam_width": "W", "threshold": "τ", "stop_below": "stop", "temperature": "T"}
YLABELS = {
    "speedup_vs_sampling": "speed-up over sampling (×)",
    "speedup_vs_sps": "speed-up over SpS (×)",
    "acceptance_rate": "acceptance rate (accepted / drafted)",
    "mean_accept_length": "accepted length (draft tokens per block)",
    "block_efficiency": "block efficiency (tokens per target call)",
    "perplexity": "perplexity of output under p (lower = better)",
    "tokens_per_s": "speed (tokens/s)",
}
MISSING_COLOR = "#9a9a9a"
FIGURE_NAMES = (
    "table2_speedup",
    "table2_quality_speed",
    "sweep_gamma",
    "sweep_beam_width",
    "sweep_threshold",
    "sweep_stop_below",
    "sweep_temperature",
)


def _label(method: str) -> str:
    return label(method)


def _task_label(task: str) -> str:
    return TASKS[task].label if task in TASKS else task


def _score_bounds(task: str, score_name: str | None) -> tuple[float, float]:
    info = TASKS[task].score_info(score_name) if task in TASKS and score_name else None
    return info.bounds if info else (-math.inf, math.inf)


def _keep_within(ax, low: float, high: float) -> None:
    """The y axis inside the values the quantity can take: margins around a constant no longer
    reach below 0 for a fraction or below 1 for a perplexity."""
    bottom, top = ax.get_ylim()
    bottom, top = max(bottom, low), min(top, high)
    if math.isfinite(high) and top - bottom < 0.1 * (high - low):  # a constant: a tenth of the range above it
        top = min(high, bottom + 0.1 * (high - low))
    ax.set_ylim(bottom, top)


def _score_label(task: str, score_name: str | None) -> str:
    info = TASKS[task].score_info(score_name) if task in TASKS and score_name else None
    return info.label if info else score_name or "task score (missing)"


UNKNOWN_STYLE = ("#17becf", "X")  # a cell's method the registry does not know (one since removed)


def _style(method: str) -> tuple[str, str]:
    """The method's colour and marker in every figure (its MethodSpec's)."""
    spec = specs(study_only=False).get(method)
    return (spec.color, spec.marker) if spec else UNKNOWN_STYLE


def _finite(value) -> bool:
    return value is not None and isinstance(value, int | float) and math.isfinite(value)


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas: savefig and inline display need no GUI backend
    return fig


def _add_caption(fig: Figure, text: str, title: str) -> None:
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.supxlabel(_wrap(text, 150), fontsize=8, color="#333333")


def _wrap(text: str, width: int) -> str:
    """Break a ' · '-joined caption into lines of at most ``width`` characters."""
    lines, current = [], ""
    for part in text.split(" · "):
        candidate = f"{current} · {part}" if current else part
        if len(candidate) > width and current:
            lines.append(current)
            candidate = part
        current = candidate
    return "\n".join(lines + [current])


# ----------------------------------------------------------------------------- Table 2
SPEEDUP_PANELS = ("speedup_vs_sampling", "speedup_vs_sps", "block_efficiency")


def speedup_bars(
    cells: pd.DataFrame,
    experiment: str = "table2",
    pair: str | None = None,
    overrides: str | None = "",
    frame: pd.DataFrame | None = None,
) -> Figure:
    """Grouped bars per task and method: speed-up over sampling, speed-up over SpS and block
    efficiency (tokens per target call, free of timing noise), one panel each with each bar's own
    value written on it; missing cells as hatched "missing" slots; why a bar is below 1× in the
    caption (``slowdown_notes``). ``overrides``: the cells' override set ("" = the base cells;
    None = any single set), as in ``table2_frame``."""
    if frame is None:  # ``frame``: these cells' table2_frame, where the caller holds it already
        frame = table2_frame(cells, experiment=experiment, pair=pair, overrides=overrides)
    tasks, methods = list(dict.fromkeys(frame["task"])), list(dict.fromkeys(frame["method"]))
    slower = slowdown_notes(frame, _table2_cells(cells, experiment, pair, overrides))
    fig = _new_figure(max(8.0, 1.9 * len(tasks) * max(1, len(methods)) / 4), 10.2 + 0.16 * len(slower))
    axes = fig.subplots(len(SPEEDUP_PANELS), 1, sharex=True)
    for ax, column in zip(axes, SPEEDUP_PANELS):
        _speedup_panel(ax, frame, column, tasks, methods)
    axes[0].set_title(
        "numbers on bars: the bar's value; dashed line: 1 (no speed-up; one token per target call); "
        "whiskers: 95% bootstrap interval (cells with ≥ 3 examples)",
        fontsize=9,
    )
    axes[-1].set_xticks(range(len(tasks)), [_task_label(t) for t in tasks])
    axes[-1].set_xlabel("task")
    handles = [Patch(facecolor=_style(m)[0], edgecolor="black", label=_label(m)) for m in methods]
    handles.append(Patch(facecolor="none", edgecolor=MISSING_COLOR, hatch="///", label="missing cell"))
    axes[0].legend(handles=handles, ncols=min(7, len(handles)), fontsize=8, loc="upper left", frameon=False)
    _add_caption(
        fig, " · ".join([caption(frame), *slower]), f"Table 2 speed-ups and block efficiency — experiment {experiment}"
    )
    return fig


def _speedup_panel(ax, frame: pd.DataFrame, column: str, tasks: list[str], methods: list[str]) -> None:
    """One panel of ``speedup_bars``: ``column``'s bar per (task, method), grouped by task, each
    with its whisker and value; the y axis tall enough for the labels and the legend above them."""
    width = 0.8 / max(1, len(methods))
    values = frame[column].astype(float) if column in frame else pd.Series([math.nan] * len(frame))
    highs = frame[f"{column}_high"].astype(float) if f"{column}_high" in frame else pd.Series(dtype=float)
    top = max([v for v in list(values) + list(highs) if _finite(v)] + [1.0]) * 1.42  # room for labels, legend
    for j, method in enumerate(methods):
        rows = frame[frame["method"] == method]
        for i, task in enumerate(tasks):
            row = rows[rows["task"] == task].iloc[0]
            x = i + (j - (len(methods) - 1) / 2) * width
            _speedup_bar(ax, row, column, x, width, top)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylim(0, top)
    ax.set_ylabel(YLABELS[column])
    ax.grid(axis="y", alpha=0.3)


def _speedup_bar(ax, row: pd.Series, column: str, x: float, width: float, top: float) -> None:
    """One cell's bar of ``column`` at ``x`` in its method's colour with its whisker and value
    written above, or a hatched "missing" slot naming why there is no value."""
    value = float(row[column]) if column in row and _finite(row[column]) else math.nan
    if row["missing"] or not _finite(value):
        reason = (
            row["status"] if row["missing"] else "no SpS cell" if column == "speedup_vs_sps" else "no sampling cell"
        )
        _missing_bar(ax, x, width, top, reason)
        return
    ax.bar(x, value, width * 0.92, color=_style(row["method"])[0], edgecolor="black", linewidth=0.4)
    bar_top = _error_bar(ax, x, value, _interval(row, column))
    ax.text(
        x,
        bar_top + top * 0.012,
        fmt_number(value),
        ha="center",
        va="bottom",
        fontsize=7,
        rotation=90,
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6},
    )


def _table2_cells(cells: pd.DataFrame, experiment: str, pair: str | None, overrides: str | None) -> pd.DataFrame:
    """The cells Table 2's bars are drawn from: the experiment's (and pair's) with these
    ``overrides`` ("" = the base cells; None = any: ``table2`` allows a single set)."""
    if "experiment" not in cells:
        return cells.iloc[0:0]
    chosen = cells[cells["experiment"] == experiment]
    chosen = chosen[chosen["overrides"] == overrides] if overrides is not None else chosen
    return chosen[chosen["pair"] == pair] if pair is not None else chosen


SLOWER_THAN = {f"speedup_vs_{b}": b for b in BASELINES}  # a speed-up bar's baseline


def slowdown_notes(frame: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """Why speed-up bars fall below 1×, in the cells' own figures. A speed-up is the method's tokens
    per target call over its baseline's, divided by the time of its block (one target call and the
    draft calls before it) over the baseline's: below 1× a block costs more than its extra tokens
    give. One line per (baseline, method) with a bar below 1×, ranges over its tasks, then the
    machine and dtype the cells ran on (``tables.recorded_machines``); [] when no bar is below 1×."""
    from mtad.report.tables import recorded_machines

    by_cell = {(r["task"], r["method"]): r for r in cells.to_dict("records")} if len(cells) else {}
    notes = []
    for column, baseline in SLOWER_THAN.items():
        values = frame[column].astype(float) if column in frame else pd.Series(math.nan, index=frame.index)
        below = frame[~frame["missing"].astype(bool) & (values < 1.0)]
        for method, rows in below.groupby("method", sort=False):
            pairs = [(by_cell.get((task, method), {}), by_cell.get((task, baseline), {})) for task in rows["task"]]
            notes.append(_slowdown(method, baseline, values[rows.index], pairs))
    if not notes:
        return []
    machines = recorded_machines(cells) or ", ".join(present(cells.get("machine", []))) or "a machine not recorded"
    return [
        "why below 1×: speed-up = (tokens per target call ÷ the baseline's) ÷ (a block's time ÷ the baseline's);"
        " a block: one target call and the draft calls before it",
        *notes,
        f"measured on {machines}",
    ]


def _slowdown(method: str, baseline: str, speedups: pd.Series, pairs: list[tuple[dict, dict]]) -> str:
    """`SpS below 1× vs sampling on 4 task(s) (0.58–0.77×): 1.28–1.97 tokens per target call, but
    a block takes 2.22–2.60 sampling steps (target call 2.03–2.40, drafts 0.10–0.16)`."""

    def relative(key: str, base_key: str, per_call: bool = True) -> str:
        """The range over tasks of the method's ``key`` over the baseline's ``base_key``, each per
        target call (``per_call``) or as it is."""
        ratios = [
            _ratio(mine.get(key), base.get(base_key))
            * (_ratio(base.get("target_calls"), mine.get("target_calls")) if per_call else 1.0)
            for mine, base in pairs
        ]
        return _span(ratios)

    tokens = relative("block_efficiency", "block_efficiency", per_call=False)
    text = f"{_label(method)} below 1× vs {_label(baseline)} on {len(pairs)} task(s) ({_span(speedups)}×): "
    text += (
        f"{tokens} tokens per target call"
        if baseline == REFERENCE
        else f"{tokens}× {_label(baseline)}'s tokens per target call"
    )
    block = relative("decode_seconds", "decode_seconds")
    if block != "?":
        unit = "sampling steps" if baseline == REFERENCE else f"{_label(baseline)} blocks"
        split = [f"{name} {relative(key, 'decode_seconds')}" for name, key in BLOCK_PARTS.items()]
        known = [part for part in split if not part.endswith("?")]
        text += f", but a block takes {block} {unit}" + (f" ({', '.join(known)})" if known else "")
    return text


BLOCK_PARTS = {"target call": "target_seconds", "drafts": "draft_seconds"}  # where a block's time goes


def _ratio(numerator, denominator) -> float:
    """numerator / denominator, NaN where either is missing or the denominator is 0."""
    if not (_finite(numerator) and _finite(denominator)) or denominator == 0:
        return math.nan
    return float(numerator) / float(denominator)


def _span(values, pattern: str = "{:.2f}") -> str:
    """The finite values' range `lo–hi` (one value when they agree), "?" when none is finite."""
    finite = sorted(v for v in values if _finite(v))
    if not finite:
        return "?"
    low, high = pattern.format(finite[0]), pattern.format(finite[-1])
    return low if low == high else f"{low}–{high}"


def _missing_bar(ax, x: float, width: float, top: float, reason: str) -> None:
    # full height, so the slot never reads as a value
    ax.bar(x, top * 0.84, width * 0.92, facecolor="none", edgecolor=MISSING_COLOR, hatch="///", linewidth=0.6)
    ax.text(
        x,
        top * 0.42,
        f"missing ({reason})",
        rotation=90,
        ha="center",
        va="center",
        fontsize=7.5,
        color="#333333",
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0},
    )


def quality_vs_speed(
    cells: pd.DataFrame,
    experiment: str = "table2",
    pair: str | None = None,
    overrides: str | None = "",
    frame: pd.DataFrame | None = None,
) -> Figure:
    """Per task, perplexity (top row) and the task's score (bottom row) against tokens/s, one
    marker per method; methods without a finished cell listed as missing in the panel; a score
    panel with nothing to show left out, its reason in the caption (``empty_score_panels``)
    (``overrides`` as in ``speedup_bars``)."""
    if frame is None:  # ``frame``: these cells' table2_frame, where the caller holds it already
        frame = table2_frame(cells, experiment=experiment, pair=pair, overrides=overrides)
    tasks, methods = list(dict.fromkeys(frame["task"])), list(dict.fromkeys(frame["method"]))
    dropped = empty_score_panels(frame)
    quantities = ("perplexity", "score") if len(dropped) < len(tasks) else ("perplexity",)
    fig = _new_figure(max(8.0, 3.6 * len(tasks)), 3.5 * len(quantities) + 0.3 * len(dropped))
    axes = fig.subplots(len(quantities), len(tasks), squeeze=False)
    for i, task in enumerate(tasks):
        rows = frame[frame["task"] == task]
        score_name = _score_name(task, rows)
        for ax, column in zip(axes[:, i], quantities):
            if column == "score" and task in dropped:
                ax.remove()  # nothing to show: the reason goes in the caption, not an empty panel
                continue
            _quality_panel(ax, rows, column, task, score_name)
        axes[0, i].set_title(_task_label(task))
        axes[0, i].set_ylabel(YLABELS["perplexity"] if i == 0 else "perplexity")
        if task not in dropped and len(quantities) > 1:
            axes[1, i].set_ylabel(_score_label(task, score_name))
    fig.legend(handles=_marker_handles(methods), loc="outside right upper", fontsize=9, frameon=False)
    _add_caption(
        fig,
        " · ".join(
            [
                caption(frame),
                "whiskers: 95% bootstrap intervals over examples (cells with ≥ 3)",
                *(f"no score panel for {_task_label(task)}: {reason}" for task, reason in dropped.items()),
            ]
        ),
        f"Quality against speed per task — experiment {experiment}",
    )
    return fig


def _quality_panel(ax, rows: pd.DataFrame, column: str, task: str, score_name: str | None) -> None:
    """One task's panel of ``quality_vs_speed``: each method's ``column`` (perplexity or the task's
    score) against its tokens/s with both intervals, the y axis inside the values the quantity can
    take, and a note naming the methods it lacks."""
    absent, plotted = [], 0
    for row in rows.itertuples(index=False):
        y = getattr(row, column, math.nan)
        if row.missing or not _finite(y) or (column == "score" and row.score_name != score_name):
            absent.append(_label(row.method) + (f" ({row.status})" if row.missing else ""))
            continue
        color, marker = _style(row.method)
        ax.plot(
            row.tokens_per_s,
            y,
            linestyle="none",
            marker=marker,
            markersize=9,
            color=color,
            markeredgecolor="black",
            markeredgewidth=0.5,
            clip_on=False,  # a score at its bound (0) is drawn whole, on the axis
        )
        intervals = (_interval(row._asdict(), "tokens_per_s"), _interval(row._asdict(), column))
        _error_bars_2d(ax, row.tokens_per_s, y, *intervals, color)
        plotted += 1
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    ax.set_xlabel(YLABELS["tokens_per_s"])
    _keep_within(ax, *((1.0, math.inf) if column == "perplexity" else _score_bounds(task, score_name)))
    if absent:
        _missing_note(ax, column, absent, rows, plotted)


def _marker_handles(methods: list[str]) -> list[Line2D]:
    """The legend of ``quality_vs_speed``: each method's marker in its colour."""
    return [
        Line2D(
            [],
            [],
            linestyle="none",
            marker=_style(m)[1],
            color=_style(m)[0],
            markeredgecolor="black",
            markersize=8,
            label=_label(m),
        )
        for m in methods
    ]


def empty_score_panels(frame: pd.DataFrame) -> dict[str, str]:
    """{task: why its score panel would show nothing} for the tasks of a Table 2 frame whose
    finished cells all score 0 or have no score (a task without a judge, say): such a panel is
    dropped, not drawn empty."""
    dropped = {}
    for task, rows in frame.groupby("task", sort=False):
        ran = rows[~rows["missing"].astype(bool)]
        name = _score_name(task, ran)
        scores = [float(v) for v, n in zip(ran.get("score", []), ran.get("score_name", [])) if n == name and _finite(v)]
        if ran.empty:
            dropped[task] = "no finished cell"
        elif not scores:
            reasons = sorted({r for r in ran.get("score_missing_reason", []) if isinstance(r, str) and r})
            dropped[task] = "no method has a score" + (f" ({'; '.join(reasons)})" if reasons else "")
        elif not any(scores):
            none = " or has none" if len(scores) < len(ran) else ""
            dropped[task] = f"every method scores 0{none} ({_score_label(task, name)})"
    return dropped


def _missing_note(ax, column: str, absent: list[str], rows: pd.DataFrame, plotted: int) -> None:
    """A wrapped box listing what a quality panel lacks; the reason when nothing could be drawn."""
    what = "perplexity" if column == "perplexity" else "score"
    if plotted:
        text = f"no {what}:\n" + "\n".join(absent)
    else:
        reasons = {r for r in rows.get(f"{column}_missing_reason", []) if isinstance(r, str) and r}
        text = f"no {what} for any method" + (": " + "; ".join(sorted(reasons)) if reasons else "")
        ax.axis("off")  # nothing is plotted: no axes that read as an empty measurement
    ax.text(
        0.03,
        0.97,
        textwrap.fill(text, 34, replace_whitespace=False) if not plotted else text,
        transform=ax.transAxes,
        va="top",
        fontsize=7.5,
        color="#333333",
        bbox={"facecolor": "white", "edgecolor": MISSING_COLOR},
    )


def _score_name(task: str, rows: pd.DataFrame) -> str | None:
    """The task's headline score name, only if the cells report it (never a count like 'examples')."""
    names = [n for n in rows.get("score_name", []) if isinstance(n, str)]
    name = TASKS[task].primary_score if task in TASKS else None
    return name if name in names else None


# ----------------------------------------------------------------------------- sweeps
def sweep_figure(
    cells: pd.DataFrame,
    sweep: str,
    panels: tuple[str, ...],
    experiment: str = "sweeps",
    pair: str | None = None,
    task: str | None = None,
    methods: list[str] | None = None,
) -> Figure:
    """One panel per metric in ``panels`` against the swept parameter, one line per method;
    planned but missing points as grey x marks on the x axis."""
    frame = sweep_frame(cells, sweep, experiment=experiment, pair=pair, task=task, methods=methods)
    baselines = baseline_cells(cells, frame)
    param = frame["param"].iloc[0] if len(frame) else sweep
    ncols = 2 if len(panels) == 4 else len(panels)
    nrows = math.ceil(len(panels) / ncols)
    fig = _new_figure(4.6 * ncols + 1.6, 3.9 * nrows + 0.9)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    intervals = sweep_intervals(frame, baselines)
    for ax, column in zip(axes, panels):
        _sweep_panel(ax, frame, column, intervals)
        _reference_lines(ax, column, baselines, per_value=swept_baseline(frame))
        ax.set_xticks(sorted(set(frame["value"])))
        ax.set_xlabel(PARAM_LABELS.get(param, param))
        ax.set_ylabel(YLABELS.get(column, column))
        ax.grid(alpha=0.3)
    fig.legend(handles=_sweep_handles(frame), loc="outside right upper", fontsize=9, frameon=False)
    where = (
        f"{frame['pair'].iloc[0]} on {_task_label(frame['task'].iloc[0])}"
        if len(frame) and isinstance(frame["pair"].iloc[0], str)
        else "no cells yet"
    )
    _add_caption(
        fig, _sweep_caption(frame, baselines, param), f"{PARAM_LABELS.get(param, param).split(' (')[0]} sweep — {where}"
    )
    return fig


def _sweep_panel(ax, frame: pd.DataFrame, column: str, intervals: dict) -> None:
    """One panel of ``sweep_figure``: each method's ``column`` against the swept value as a line
    broken at missing cells, whiskers where ``intervals`` (``sweep_intervals``) has one, and an x on
    the axis, side by side per method, at each value it lacks."""
    methods = list(dict.fromkeys(frame["method"]))
    for method, rows in frame.groupby("method", sort=False):
        color, marker = _style(method)
        y = (
            rows[column].map(lambda v: float(v) if _finite(v) else math.nan)
            if column in rows
            else pd.Series(math.nan, index=rows.index)
        )
        y[rows["missing"]] = math.nan  # NaN breaks the line: no segment drawn across a missing cell
        ax.plot(
            rows["value"],
            y,
            marker=marker,
            color=color,
            label=_label(method),
            markeredgecolor="black",
            markeredgewidth=0.4,
        )
        for x, value, row_intervals in zip(rows["value"], y, (intervals.get(i, {}) for i in rows.index)):
            if _finite(value) and column in row_intervals:
                _error_bar(ax, x, value, row_intervals[column], color=color)
        _missing_marks(
            ax,
            rows["value"][y.isna()],
            color,
            offset_pt=6.0 * (methods.index(method) - (len(methods) - 1) / 2),
        )


def _sweep_handles(frame: pd.DataFrame) -> list[Line2D]:
    """The legend of ``sweep_figure``: each method's line and marker, sampling's reference line and
    the missing-cell mark."""
    handles = [
        Line2D([], [], color=_style(m)[0], marker=_style(m)[1], markeredgecolor="black", label=_label(m))
        for m in dict.fromkeys(frame["method"])
    ]
    return handles + [
        Line2D([], [], color="black", linestyle="--", label="sampling (reference)"),
        Line2D(
            [],
            [],
            color=MISSING_COLOR,
            marker="x",
            markeredgewidth=2,
            linestyle="none",
            label="× on x axis: missing\n(method's colour)",
        ),
    ]


def _sweep_caption(frame: pd.DataFrame, baselines: pd.DataFrame, param: str) -> str:
    """The caption of ``sweep_figure``: the cells' ``caption``, the planned points that are missing
    per method, and what the whiskers are."""
    gaps = frame[frame["missing"]]
    listed = "; ".join(
        f"{_label(m)} {PARAM_SYMBOLS.get(param, param)}={', '.join(fmt_value(v, 'g') for v in g['value'])}"
        for m, g in gaps.groupby("method", sort=False)
    )
    return (
        caption(frame, baselines)
        + (f" · missing: {listed}" if listed else "")
        + " · whiskers: 95% bootstrap intervals over examples (cells with ≥ 3)"
    )


def _missing_marks(ax, xs, color: str, offset_pt: float = 0.0) -> None:
    """An x on the x axis (below any data point, thanks to the axes margins) at each missing value."""
    if len(xs) == 0:
        return
    transform = blended_transform_factory(ax.transData, ax.transAxes)  # x in data, y in axes fraction
    # methods missing at the same x sit side by side, offset_pt points apart
    transform = transform + ScaledTranslation(offset_pt / 72, 0, ax.figure.dpi_scale_trans)
    (marks,) = ax.plot(
        list(xs),
        [0.0] * len(xs),
        linestyle="none",
        marker="x",
        color=color,
        markersize=9,
        markeredgewidth=2,
        transform=transform,
        clip_on=False,
        zorder=5,
    )
    marks.set_in_layout(False)  # drawn over the spine; must not take room from the axes


def _reference_lines(ax, column: str, baselines: pd.DataFrame, per_value: bool = False) -> None:
    """Sampling's level where it has one: speed-up 1 and its perplexity (`per_value`: sampling is
    a swept line of its own, its perplexity drawn at each value, not as a level)."""
    if column.startswith("speedup_vs_") or column == "block_efficiency":  # sampling: 1 token per target call
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.9)
    if column == "perplexity" and not per_value:
        sampling = (
            baselines[baselines["method"] == REFERENCE]["perplexity"].dropna() if "perplexity" in baselines else []
        )
        if len(sampling):
            ax.axhline(float(sampling.iloc[0]), color="black", linestyle="--", linewidth=0.9)
        else:
            ax.text(
                0.02,
                0.98,
                "sampling cell missing: no reference",
                transform=ax.transAxes,
                va="top",
                fontsize=7,
                color="#555555",
            )


SWEEP_PANELS = ("speedup_vs_sampling", "block_efficiency", "acceptance_rate", "perplexity")


def gamma_sweep(cells: pd.DataFrame, **kwargs) -> Figure:
    """Speed-up over sampling, block efficiency (speed-up free of timing noise), acceptance rate
    and perplexity against γ (SpS, MTAD, MMTAD)."""
    return sweep_figure(cells, "gamma", SWEEP_PANELS, **kwargs)


def beam_width_sweep(cells: pd.DataFrame, **kwargs) -> Figure:
    """The same four panels as ``gamma_sweep`` against W (MTAD, MMTAD)."""
    return sweep_figure(cells, "beam_width", SWEEP_PANELS, **kwargs)


def threshold_sweep(cells: pd.DataFrame, methods: list[str] | None = None, **kwargs) -> Figure:
    """Accepted length, speed-up over sampling and perplexity against τ: MTAD (the figure's
    subject), plus MMTAD when any of its τ cells exists (conf/sweep/threshold.yaml plans both)."""
    if methods is None:
        experiment = kwargs.get("experiment", "sweeps")
        swept = (
            cells[
                (cells.get("experiment") == experiment)
                & (cells.get("method") == MMTAD)
                & cells.get("overrides", pd.Series(dtype=str)).astype(str).str.startswith("method.threshold=")
            ]
            if len(cells)
            else cells
        )
        methods = [MTAD] + ([MMTAD] if len(swept) else [])
    return sweep_figure(
        cells, "threshold", ("mean_accept_length", "speedup_vs_sampling", "perplexity"), methods=methods, **kwargs
    )


def stop_below_sweep(cells: pd.DataFrame, **kwargs) -> Figure:
    """Adaptive drafting: the four panels of ``gamma_sweep`` against the draft probability that
    ends drafting (every drafting method; 0 is its fixed-γ self)."""
    return sweep_figure(cells, "stop_below", SWEEP_PANELS, **kwargs)


def temperature_sweep(cells: pd.DataFrame, **kwargs) -> Figure:
    """Block efficiency, acceptance rate, perplexity and speed-up over sampling at the same
    temperature against T (0 = greedy), for sampling and every method."""
    panels = ("block_efficiency", "acceptance_rate", "perplexity", "speedup_vs_sampling")
    return sweep_figure(cells, "temperature", panels, **kwargs)


# ----------------------------------------------------------------------------- intervals
def _interval(row, column: str) -> tuple[float, float] | None:
    """(low, high) of ``column`` in a table2 frame row (``tables.add_intervals``), if any."""
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    return (float(low), float(high)) if _finite(low) and _finite(high) else None


def _error_bar(ax, x: float, value: float, interval, color: str = "black") -> float:
    """A vertical whisker over ``interval`` ((low, high) or an Interval); returns the top of bar
    and whisker (where a label above it goes)."""
    if interval is None:
        return value
    low, high = (interval.low, interval.high) if hasattr(interval, "low") else interval
    if low is None or high is None:
        return value
    ax.errorbar(
        [x],
        [value],
        yerr=[[max(0.0, value - low)], [max(0.0, high - value)]],
        fmt="none",
        ecolor=color,
        elinewidth=0.9,
        capsize=2.5,
        zorder=4,
    )
    return max(value, high)


def _error_bars_2d(ax, x: float, y: float, x_interval, y_interval, color: str) -> None:
    if x_interval is None and y_interval is None:
        return
    xerr = [[x - x_interval[0]], [x_interval[1] - x]] if x_interval else None
    yerr = [[y - y_interval[0]], [y_interval[1] - y]] if y_interval else None
    ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5, zorder=2)


def sweep_intervals(frame: pd.DataFrame, baselines: pd.DataFrame) -> dict:
    """{frame index: {column: Interval}} for the finished cells of a sweep frame (``tables.cell_intervals``;
    speed-ups paired with the sweep's sampling/SpS cells)."""
    from mtad.report.examples import cell_examples
    from mtad.report.tables import cell_intervals

    if "path" not in frame:
        return {}
    base = {
        m: cell_examples(p)
        for m, p in zip(baselines.get("method", []), baselines.get("path", []))
        if isinstance(p, str)
    }
    by_value = {}  # a swept sampling's cell per value: the speed-ups at that value pair with it
    if swept_baseline(frame):
        sampling = frame[(frame["method"] == REFERENCE) & ~frame["missing"]]
        by_value = {v: cell_examples(p) for v, p in zip(sampling["value"], sampling["path"]) if isinstance(p, str)}
    out = {}
    for i, row in frame.iterrows():
        if row.get("missing") or not isinstance(row.get("path"), str):
            continue
        paired = base | ({REFERENCE: by_value[row["value"]]} if row["value"] in by_value else {})
        if swept_baseline(frame) and row["value"] not in by_value:
            paired.pop(REFERENCE, None)  # no sampling cell at this value: no speed-up interval
        found = cell_intervals(cell_examples(row["path"]), {m: e for m, e in paired.items() if m != row["method"]})
        out[i] = {k: v for k, v in found.items() if v.available}
    return out


def swept_cells(cells: pd.DataFrame, experiment: str, sweep: str) -> int:
    """How many cells of ``experiment`` set the sweep's parameter on the command line."""
    key = f"method.{SWEEP_PARAMS[sweep]}="
    overrides = cells.loc[cells["experiment"] == experiment, "overrides"].astype(str)
    return int(overrides.str.contains(key, regex=False).sum())


# ----------------------------------------------------------------------------- files
def settle_limits(fig: Figure, digits: int = 6) -> None:
    """Every axis' limits rounded to `digits` significant digits. Autoscaled limits carry the last bits
    of the arithmetic behind the data (a bootstrap's sums, a mean), which round differently on CPUs
    with other vector units; a millionth of a point moves every tick of the PDF, so the same cells would
    render to other bytes on another machine. Rounded, they render alike."""
    for ax in fig.axes:
        ax.set_xlim(*(float(f"{v:.{digits}g}") for v in ax.get_xlim()))
        ax.set_ylim(*(float(f"{v:.{digits}g}") for v in ax.get_ylim()))


def save_figure(fig: Figure, name: str, out_dir: str | Path) -> list[Path]:
    """``<out_dir>/<name>.png`` and ``.pdf``; returns both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settle_limits(fig)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1], metadata={"CreationDate": None})  # no timestamp: reruns give the same file
    return paths


def build_all(
    results_root: str | Path = "results/runs",
    out_dir: str | Path = "results/figures",
    table_experiment: str = "table2",
    sweep_experiment: str = "sweeps",
    overrides: str | None = "",
) -> dict[str, list[Path]]:
    """Every figure whose experiment has at least one cell under ``results_root``; the others are
    reported under the key ``skipped`` with the reason (no figure full of nothing is written).
    ``overrides``: the Table 2 figures' override set ("" = the base cells; None = any single set)."""
    cells = load_cells(results_root)
    have = set(cells["experiment"]) if "experiment" in cells else set()
    table = functools.cache(lambda: table2_frame(cells, table_experiment, overrides=overrides))  # both figures'
    jobs = {
        "table2_speedup": (
            table_experiment,
            lambda: speedup_bars(cells, table_experiment, overrides=overrides, frame=table()),
        ),
        "table2_quality_speed": (
            table_experiment,
            lambda: quality_vs_speed(cells, table_experiment, overrides=overrides, frame=table()),
        ),
        "sweep_gamma": (sweep_experiment, lambda: gamma_sweep(cells, experiment=sweep_experiment)),
        "sweep_beam_width": (sweep_experiment, lambda: beam_width_sweep(cells, experiment=sweep_experiment)),
        "sweep_threshold": (sweep_experiment, lambda: threshold_sweep(cells, experiment=sweep_experiment)),
        "sweep_stop_below": (sweep_experiment, lambda: stop_below_sweep(cells, experiment=sweep_experiment)),
        "sweep_temperature": (sweep_experiment, lambda: temperature_sweep(cells, experiment=sweep_experiment)),
    }
    written, skipped = {}, []
    for name, (experiment, make) in jobs.items():
        if experiment not in have:
            skipped.append(f"{name}: no cells of experiment {experiment!r} under {results_root}")
            continue
        swept = name.removeprefix("sweep_")
        if name != swept and not swept_cells(cells, experiment, swept):
            skipped.append(f"{name}: no cell of `sweep={swept}` under {results_root}")
            continue
        written[name] = save_figure(make(), name, out_dir)
    if "table2_quality_speed" in written:  # a panel left out is said, as a figure left out is
        dropped = empty_score_panels(table())
        skipped += [
            f"table2_quality_speed's score panel for {_task_label(task)}: {why}" for task, why in dropped.items()
        ]
    written["skipped"] = skipped
    return written
