"""The claims report: every claim of the paper, from finished cells, with a 95% interval and a verdict.

``python -m mtad.experiments.claims --report-only [experiment=... pair=...]`` builds it; the report
only reads: the cells of the experiment (``mtad.experiments.claims`` runs the ``claims``
experiments, every method interleaved within each prompt; any other experiment, e.g. ``table2``,
is read from its cells, whose examples are paired by id across methods) and the experiment's
``theory.json`` (C5, C6; ``mtad.experiments.theory``). Then:

- C1 perplexity: PPL(MTAD)/PPL(sampling) − 1 and the same for MMTAD;
- C2 task quality: score(MTAD)/score(sampling) − 1 per task that scores above zero, the tasks
  the target scores 0 on for every method named as such;
- C3 speed: tokens/s of MTAD over SpS and over the best of SpS, SpecTr and SpecInfer, and of
  MMTAD over MTAD, with the block efficiency ratio (tokens per target call, free of timing
  noise) beside;
- C4 energy: J/token of SpS (and of the most frugal conventional method) over MTAD's, from
  hardware counters only;
- beside C1 to C4, the experiment's ``variants`` (``Variant``: a method with options, e.g. adaptive
  drafting or the official implementation's options, in its own cells) against the method at its
  defaults, and its ``comparisons`` (``Comparison``: e.g. block verification against SpS, whose
  chain it verifies, and MTAD against block verification), in the rows of the kinds each names:
  the suite's extension, without a verdict; a comparison whose method no module registers here
  keeps its rows, "not run", and the report names the method they need;
- C5 and C6 on enumerable tiny models, as ``mtad.experiments.theory`` computed them.

C1 to C4 and the variants' rows are one loop over the claim kinds (``mtad.report.kind_claims``),
C5 and C6 are read from ``theory.json`` (``mtad.report.theory_claims``), each row a ``Claim``
(``mtad.report.claim_row``). This module assembles them into the report: every row of every planned
cell ("not run", with the command that runs it, where a cell is absent), the cells' coverage and
the design behind the estimates; then writes it (as Markdown: ``mtad.report.claims_markdown``).
The rows, their figures and the paper version each figure comes from are ``mtad.paper``.

Every interval is a paired bootstrap over prompts (``mtad.stats.intervals``); the verdict rule
is written at the top of the report. Output: ``results/claims/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from mtad.records import read_json, write_if_changed
from mtad.report.cells import load_cells
from mtad.report.claim_row import Claim
from mtad.report.kind_claims import (
    KINDS,
    PAPER_TASKS,
    Measured,
    ReportSettings,
    evidence_claims,
    kind_claims,
    with_variants,
)
from mtad.report.theory_claims import theory_claims, theory_not_run, with_holm
from mtad.report.values import in_order, is_missing, present
from mtad.result_files import CLAIMS, read_section, write_section
from mtad.runner.layout import REFERENCE_ROOT, theory_path
from mtad.stats import intervals as iv

log = logging.getLogger("mtad.claims")


def build_report(results_root, experiment: str, pair: str, settings: ReportSettings, theory: bool = True) -> dict:
    """Every claim from the cells of ``experiment``/``pair`` under ``results_root``, and C5/C6 from
    the experiment's theory.json when there is one (``theory``: False leaves them out)."""
    cells = load_cells(results_root, experiment=experiment)
    cells = cells[cells["pair"] == pair] if "pair" in cells else cells
    if cells.empty:
        committed = Path(REFERENCE_ROOT)
        here = Path(results_root).resolve() == committed.resolve()
        read = (
            ""
            if here or not list(committed.glob(f"{experiment}/{pair}/*/*/metrics.json"))
            else (f"the committed run is under {committed}: add results_root={committed} to report it; or ")
        )
        raise ValueError(
            f"no cells of experiment {experiment!r} and pair {pair!r} under {results_root}; {read}run it "
            f"(`make claims`, about 25 minutes on 2 cores, or `mtad-run experiment={experiment} pair={pair}`)"
        )
    cells = with_variants(cells, settings.variants)
    tasks = list(settings.tasks or _ordered_tasks(cells))  # planned: absent ones get "not run" rows
    timing = (
        "interleaved within each prompt"
        if "timing" in cells and cells["timing"].notna().any()
        else "one cell after another (not interleaved)"
    )
    measured = Measured.of(cells, settings, experiment, pair, timing=timing)
    measured.labels |= {v.key: v.label for v in settings.variants}
    claims = []
    for kind in KINDS:
        claims += kind_claims(kind, measured, tasks, settings.extensions)
        claims += evidence_claims(kind, results_root, pair, tasks, settings)
    detail = with_holm(read_json(theory_path(results_root, experiment)), settings.confidence) if theory else {}
    if detail:
        claims += theory_claims(detail)
    elif theory:
        claims += theory_not_run(theory_path(results_root, experiment), experiment)
    methods = [*settings.planned_methods, *(v.key for v in settings.variants)]
    coverage = cell_coverage(cells, tasks, methods, pair, Path(results_root) / experiment)
    coverage["unregistered"] = settings.unregistered
    command = run_command(experiment, pair, results_root, interleaved=bool(settings.tasks))
    for claim in claims:
        if claim.source == experiment:
            mark_missing_cells(claim, coverage, command)
            mark_unregistered(claim, settings.unregistered)
    return {
        "experiment": experiment,
        "pair": pair,
        "results_root": str(results_root),
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rule": iv.VERDICT_RULE,
        "confidence": settings.confidence,
        "resamples": settings.resamples,
        "interval_method": settings.interval,
        "timing": timing,
        "design": design(cells, measured.frame, tasks),
        "coverage": coverage,
        "claims": [c.as_dict() for c in claims],
        "theory": detail,
    }


def cell_coverage(cells: pd.DataFrame, tasks: list[str], methods: list[str], pair: str, root: Path) -> dict:
    """The cells the experiment plans (its tasks x its claims methods and variants' keys), which of
    them are present and which are missing from the folder read."""
    present = set(zip(cells["task"], cells["method"]))
    planned = [(t, m) for t in tasks for m in methods]
    return {
        "root": str(root),
        "pair": pair,
        "planned": len(planned),
        "present": sum(cell in present for cell in planned),
        "missing": [f"{pair}/{t}/{m}" for t, m in planned if (t, m) not in present],
    }


def run_command(experiment: str, pair: str, results_root, interleaved: bool) -> str:
    """The command that runs the experiment's missing cells into ``results_root`` (finished cells
    are kept): the claims command for an experiment it runs interleaved, else ``mtad-run``'s grid."""
    where = f"experiment={experiment} pair={pair} results_root={results_root}"
    return f"python -m mtad.experiments.claims {where}" if interleaved else f"mtad-run {where}"


def mark_missing_cells(claim: Claim, coverage: dict, command: str | None = None) -> None:
    """A claim that reads a planned cell absent from the root says so: "not run", naming the cells
    and the command that runs them (a verdict of its own: nothing was measured, unlike "not
    measurable here")."""
    absent = [f"{coverage['pair']}/{claim.task}/{m}" for m in claim.methods]
    absent = [cell for cell in absent if cell in coverage["missing"]]
    if absent:
        claim.interval, claim.verdict = None, iv.NOT_RUN
        claim.reason = f"not run: cell(s) {', '.join(absent)} missing from {coverage['root']}"
        claim.reason += f" (`{command}` runs them)" if command else ""


def mark_unregistered(claim: Claim, unregistered: list[str]) -> None:
    """A row that compares a method no module registers here is "not run", naming that method (no
    command runs its cells: the method itself is absent)."""
    needed = [m for m in claim.methods if m in unregistered]
    if needed:
        claim.interval, claim.verdict = None, iv.NOT_RUN
        claim.reason = f"not run: needs {', '.join(needed)}, which no module registers here"


def _ordered_tasks(cells: pd.DataFrame) -> list[str]:
    return in_order(set(cells["task"]), list(PAPER_TASKS) + ["chat"])


def design(cells: pd.DataFrame, frame: pd.DataFrame, tasks: list[str]) -> dict:
    """Sample sizes and settings behind the estimates."""
    per_task = {}
    for task in tasks:
        rows = cells[cells["task"] == task]
        per_task[task] = {
            "examples_per_method": {
                m: int(frame[(frame["task"] == task) & (frame["method"] == m)]["id"].nunique())
                for m in sorted(set(rows["method"]))
            },
            "examples_planned": _int_or_none(rows.get("examples_planned", pd.Series(dtype=float)).max()),
            "max_new_tokens": _int_or_none(rows.get("max_new_tokens", pd.Series(dtype=float)).max()),
            "status": sorted(set(rows["status"])),
        }
    commits = sorted({c for c in cells.get("git_commit", []) if isinstance(c, str)})
    return {
        "tasks": per_task,
        "machine": present(cells.get("machine", [])),
        "dtype": present(cells.get("dtype", [])),
        "seed": present(cells.get("seed", [])),
        "commits": commits,
        "threads": present(cells.get("torch_threads", [])),
    }


def _int_or_none(value) -> int | None:
    return None if is_missing(value) else int(value)


def report_name(experiment: str, pair: str, default_pair: str | None) -> str:
    """``claims`` for the claims experiment on its own pair, else ``claims_<experiment>[_<pair>]``."""
    stem = experiment if experiment.startswith("claims") else f"claims_{experiment}"
    return stem if pair == default_pair else f"{stem}_{pair}"


def write_report(report: dict, out_dir: str | Path, name: str) -> tuple[Path, Path]:
    """The report as ``<out_dir>/<name>.md`` and as the claims result file ``<name>.json`` (`mtad.result_files`)."""
    from mtad.report.claims_markdown import to_markdown

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / f"{name}.md"
    write_if_changed(md, to_markdown(report))
    return md, write_section(CLAIMS, out_dir, "claims", report, stem=name)


def read_report(path: str | Path) -> dict | None:
    """The report stored at `path` (a claims result file, e.g. ``results/claims/claims.json``); None when absent."""
    path = Path(path)
    return read_section(CLAIMS, path.parent, "claims", stem=path.stem)


def publish(cfg, settings: ReportSettings, name: str, args, note: str = "") -> int:
    """Build the report from the cells, write it and print it."""
    try:
        report = build_report(cfg.results_root, cfg.experiment_name, cfg.pair.name, settings, not args.no_theory)
    except ValueError as err:
        print(f"claims: {err}", file=sys.stderr)
        return 1
    md, js = write_report(report, args.out, args.name or name)
    print(md.read_text())
    print(f"wrote {md} and {js}{note}")
    return 0
