"""``results/README.md``: what the committed results show, every figure rendered from them.

The prose of the project's READMEs quotes no measured figure (``tests/test_quoted_figures.py``);
this page is where a reader finds them, one section per committed result, each naming the file
it reads and the machine that measured it, and the stamp of the `make results` step that wrote it
(machine, pinned target dtype, commit). ``make results-readme`` (``scripts/results_readme.py``)
writes it and ``make results`` ends with it; ``tests/test_results_readme.py`` fails when a committed
result changed without it. What the page shows of the draft is rendered by the distillation package, which
owns the draft kind's file and which the report may not import: the caller passes it in (``render``); so is
what it shows of the bench, rendered by the bench package.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from mtad.decoding.registry import REFERENCE, study_methods
from mtad.markdown import fmt_count_range, fmt_ratio, md_table, with_bounds
from mtad.metrics.acceptance_terms import terms_markdown
from mtad.provenance import read_stamp, stamp_label
from mtad.records import read_json
from mtad.report.claims_markdown import claims_table
from mtad.report.claims_report import read_report
from mtad.report.tables import TASK_ORDER
from mtad.report.values import is_missing, present
from mtad.result_files import BENCH, DRAFT

TITLE = "# What the committed results show"
INTRO = (
    "Rendered by `make results-readme` from the files named in each section (never typed by hand). "
    "Counts (block efficiency, acceptance) are free of machine load; tokens/s and its ratios belong "
    "to the machine named beside them."
)
VERDICTS = ("reproduced", "contradicted", "inconclusive", "no verdict", "not measurable here", "not run")


def _absent(path: Path, command: str) -> list[str]:
    return [f"Not committed: `{path}` (`{command}` writes it)."]


# ----------------------------------------------------------------------------- claims
def claims_section(results: Path) -> list[str]:
    path = results / "claims" / "claims.json"
    report = read_report(path)
    if not report:
        return _absent(path, "make claims")
    design = report["design"]
    counts = Counter((c["claim"], c["verdict"]) for c in report["claims"])
    claims = sorted({c["claim"] for c in report["claims"]})
    lines = [
        f"From [`claims/claims.md`](claims/claims.md) (experiment `{report['experiment']}`, pair `{report['pair']}`, "
        f"{', '.join(design['machine']) or 'machine unknown'}, dtype {', '.join(design['dtype']) or '?'}, "
        f"{', '.join(design['threads']) or '?'} torch thread(s), commit "
        f"{', '.join(c[:10] for c in design['commits']) or 'unknown'}). Verdicts per claim:",
        "",
        *md_table(
            ["claim", *VERDICTS],
            [[claim, *(str(counts[(claim, v)]) for v in VERDICTS)] for claim in claims],
        ),
        "",
        *claims_table(report),
    ]
    return lines


# ----------------------------------------------------------------------------- Table 2
def _table2_cell(row: pd.Series) -> str:
    if pd.isna(row.get("tokens_per_s")):
        return "not run"
    low, high = row.get("speedup_vs_sampling_low"), row.get("speedup_vs_sampling_high")
    speedup = with_bounds(fmt_ratio(row["speedup_vs_sampling"]), low, high, fmt_ratio)
    return f"{speedup}, BE {row['block_efficiency']:.2f}"


def table2_section(results: Path) -> list[str]:
    path = results / "tables" / "table2.csv"
    if not path.is_file():
        return _absent(path, "make reproduce-table2")
    df = pd.read_csv(path)
    df = df[df["variant"].isna() | (df["variant"] == "")]  # the fixed rows: the adaptive ones stay in table2.md
    tasks = [t for t in TASK_ORDER if t in set(df["task"])]
    methods = [m for m in study_methods() if m in set(df["method"])]
    rows = []
    for method in methods:
        cells = [df[(df["task"] == task) & (df["method"] == method)] for task in tasks]
        rows.append([method, *(_table2_cell(c.iloc[0]) if len(c) else "–" for c in cells)])
    lines = [
        f"From [`tables/table2.md`](tables/table2.md) (pair {', '.join(sorted(set(df['pair'])))}, "
        f"{', '.join(sorted(set(df['machine'])))}, dtype {', '.join(sorted(set(df['dtype'])))}, "
        f"{fmt_count_range(df['examples'])} examples per cell; cells timed one after "
        "another, not interleaved). Tokens/s over sampling's on the same task, its 95% interval, and block "
        "efficiency (BE: tokens per target call):",
        "",
        *md_table(["method", *tasks], rows),
        "",
    ]
    drafting = df[df["method"] != REFERENCE].dropna(subset=["block_efficiency"])
    if len(drafting):
        best_be = drafting.loc[drafting.groupby("task", sort=False)["block_efficiency"].idxmax()]
        timed = df.dropna(subset=["tokens_per_s"])
        fastest = timed.loc[timed.groupby("task", sort=False)["tokens_per_s"].idxmax()]
        lines += [
            "Highest block efficiency per task: "
            + ", ".join(f"{r.task} {r.method} ({r.block_efficiency:.2f})" for r in best_be.itertuples())
            + ". Fastest per task: "
            + ", ".join(f"{r.task} {r.method} ({r.tokens_per_s:.1f} tok/s)" for r in fastest.itertuples())
            + "."
        ]
    return lines


# ----------------------------------------------------------------------------- sweeps
def sweep_entry(row: pd.Series) -> str:
    """One (method, value) entry of a sweep's table: tokens/s over sampling's, block efficiency and, for a
    method that drafts, its acceptance (sampling drafts nothing: it has none)."""
    entry = f"{fmt_ratio(row['speedup_vs_sampling'])}, BE {row['block_efficiency']:.2f}"
    return entry if is_missing(row["acceptance_rate"]) else f"{entry}, acc. {row['acceptance_rate']:.2f}"


def sweeps_section(results: Path) -> list[str]:
    from mtad.report.cells import load_cells
    from mtad.report.sweeps import SWEEP_PARAMS, sweep_frame

    cells = load_cells(results / "runs")
    lines = [
        "From the cells under `runs/sweeps/` (figures: [`figures/`](figures/)). Per method and swept value: "
        "tokens/s over sampling's, block efficiency (BE) and acceptance (accepted / drafted).",
    ]
    for sweep, param in SWEEP_PARAMS.items():
        try:
            frame = sweep_frame(cells, sweep)
        except ValueError as err:
            lines += ["", f"**{param}**: {err}"]
            continue
        done = frame[~frame["missing"]]
        if done.empty:
            lines += ["", f"**{param}**: not run (`make sweep-{sweep.replace('_', '-')}`)."]
            continue
        values = sorted(done["value"].unique())
        rows = []
        for method in [m for m in study_methods() if m in set(done["method"])]:
            mine = done[done["method"] == method].set_index("value")
            rows.append([method] + ["–" if v not in mine.index else sweep_entry(mine.loc[v]) for v in values])
        first = done.iloc[0]
        commits = ", ".join(sorted({str(c)[:10] for c in done["git_commit"].fillna("unknown")}))  # cells' code
        target, draft = ("/".join(present(done[f"{model}_dtype"])) or "?" for model in ("target", "draft"))
        dtypes = f"target {target}, draft {draft}"  # the cells' own: a sweep's experiment may pin them
        lines += [
            "",
            f"**{param}** (pair `{first['pair']}`, task `{first['task']}`, {first.get('machine', '?')}, {dtypes}, "
            f"commit {commits}):",
            "",
            *md_table([param, *(f"{v:g}" for v in values)], rows),
        ]
    return lines


# ----------------------------------------------------------------------------- the draft
def draft_section(results: Path, measurement: str | None, reports: list[str]) -> list[str]:
    """`measurement`: the draft measurement's summary block (None: not committed); `reports`: what the
    page shows of the head's reports (`mtad.distill.head_reports.readme_lines`)."""
    if measurement is None:
        return _absent(DRAFT.path(results / "draft"), "make measure-draft") + reports
    return [measurement, "", *reports]


# ----------------------------------------------------------------------------- speed
def speed_section(results: Path, speed: list[str] | None) -> list[str]:
    """`speed`: what the page shows of the committed bench (None: not committed)."""
    return _absent(BENCH.path(results / "bench"), "make bench") if speed is None else speed


# ----------------------------------------------------------------------------- reduced targets
def reduced_targets_section(results: Path, distance: list[str] | None) -> list[str]:
    """`distance`: what the page shows of the reduced targets' committed distance (None: not committed)."""
    return _absent(BENCH.path(results / "bench"), "make q4-tv") if distance is None else distance


# ----------------------------------------------------------------------------- reproduction
def reproduction_section(results: Path) -> list[str]:
    envs = sorted((results / "verify").glob("**/env.json"))
    if not envs:
        return _absent(results / "verify", "make verify-reference")
    first = read_json(envs[0])
    commit = (first.get("git") or {}).get("commit") or "unknown"
    return [
        f"`make verify` reruns the {len(envs)} reference cells under [`verify/`](verify/) (every method, "
        f"dtype {first.get('dtype')}, measured on {first.get('machine')}, commit {commit[:10]}) and requires "
        "the same tokens, counts and scores.",
    ]


# ----------------------------------------------------------------------------- the steps that wrote them
def stamp_lines(results: Path, steps: tuple[str, ...]) -> list[str]:
    """Where, in what and at which commit the `make results` steps that wrote a section ran, read from
    their stamps (`mtad.provenance.read_stamp`); nothing where none is stamped."""
    stamped = [(step, stamp) for step in steps if (stamp := read_stamp(results, step))]
    if not stamped:
        return []
    ran = "; ".join(f"`{step}` on {stamp_label(stamp)}" for step, stamp in stamped)
    return [f"Written by `make results`, step {ran}.", ""]


def render(
    results: Path,
    draft_measurement: str | None,
    draft_reports: list[str],
    speed: list[str] | None,
    distance: list[str] | None,
) -> str:
    """The page; `draft_measurement` and `draft_reports`: the distillation package's summaries of the committed
    draft kind's file (`mtad.distill.draft_measurement.readme_summary`, `mtad.distill.head_reports.readme_lines`);
    `speed` and `distance`: the bench package's of the committed bench kind's file
    (`mtad.bench.render.readme_speed_lines`, `mtad.bench.target_distance.readme_distance_lines`)."""
    sections = (  # title, the steps of `make results` that write it, its body
        ("Claims", ("claims",), claims_section(results)),
        ("Table 2", ("reproduce-table2",), table2_section(results)),
        ("Sweeps", ("sweeps",), sweeps_section(results)),
        ("The draft", ("measure-draft",), draft_section(results, draft_measurement, draft_reports)),
        ("Speed", ("profiles", "bench"), speed_section(results, speed)),
        ("Reduced targets", ("q4-tv",), reduced_targets_section(results, distance)),
        ("Reproduction", ("verify-reference",), reproduction_section(results)),
    )
    lines = [TITLE, "", INTRO, "", *terms_markdown()]
    for title, steps, body in sections:
        lines += ["", f"## {title}", "", *stamp_lines(results, steps), *body]
    return "\n".join(lines).rstrip() + "\n"
