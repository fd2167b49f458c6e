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
- C5 and C6 on enumerable tiny models, as ``mtad.experiments.theory`` computed them.

The rows, their figures and the paper version each figure comes from are ``mtad.paper``.

Every interval is a paired bootstrap over prompts (``mtad.stats.intervals``); the verdict rule
is written at the top of the report. Output: ``results/claims/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from mtad.methods import LABELS
from mtad.metrics.cost_model import (
    ACCELERATORS,
    COUNT_FIELDS,
    DEFAULT_ACCELERATOR,
    PAIR_SIZES,
    Counts,
    accelerator_profile,
    comparable,
    modelled_tokens_per_s,
)
from mtad.paper import APPROXIMATORS, NO_BOUND, VERSIONS, PaperClaim, claims_of, methods_needed
from mtad.records import read_json, write_if_changed
from mtad.report.cells import load_cells
from mtad.report.examples import example_frame, paired
from mtad.report.tables import method_params
from mtad.report.values import in_order, is_missing, present
from mtad.runner.layout import REFERENCE_ROOT, theory_path
from mtad.stats import intervals as iv
from mtad.tasks import TASKS

log = logging.getLogger("mtad.claims")

DEFAULT_METHODS = tuple(methods_needed())  # every method some claim compares
PAPER_TASKS = tuple(name for name, task in TASKS.items() if task.primary_score)  # the tasks with a score


@dataclass
class ReportSettings:
    """What the report reads and how it tests: the report's keys of an experiment's ``claims:``
    section (``mtad.experiments.claims.ClaimsSettings`` reads the whole section)."""

    methods: list = field(default_factory=lambda: list(DEFAULT_METHODS))
    tasks: list | None = None  # the planned tasks (absent cells get "not run" rows); None: those the cells hold
    zero_score_evidence: str | None = None  # experiment whose cells speak for paper tasks not run here
    confidence: float = iv.CONFIDENCE
    resamples: int = iv.RESAMPLES
    interval: str = "BCa"


# ----------------------------------------------------------------------------- one claim row
@dataclass
class Claim:
    claim: str  # "C1" ... "C6"
    comparison: str  # e.g. "MTAD vs sampling: PPL ratio − 1"
    task: str  # the prompts ("chat", "cnndm", ...) or "tiny model"
    paper: str  # the paper's figure, as text
    paper_value: float | None
    unit: str  # "relative" (−0.21 = −21%), "ratio" (1.42×), "tv", "pvalue", "logprob"
    null: float | None
    direction: int | None  # +1: the paper claims above null; −1: below
    interval: iv.Interval | None = None
    verdict: str = iv.NOT_MEASURABLE
    reason: str | None = None
    beside: dict = field(default_factory=dict)  # e.g. the block-efficiency ratio next to a speed ratio
    source: str = ""  # the experiment whose cells gave it
    version: str = ""  # the paper version the figure and the statement come from (paper.VERSIONS)
    methods: tuple = ()  # the methods whose cells it reads
    stated: bool = True  # False: the suite's extension of a claim, no version states it (no verdict)

    @classmethod
    def of(cls, paper_claim: PaperClaim, comparison: str, task: str, source: str) -> "Claim":
        c = paper_claim
        return cls(
            c.claim,
            comparison,
            task,
            c.paper,
            c.figure,
            c.unit,
            c.null,
            c.direction,
            source=source,
            version=c.version,
            methods=(c.method, *c.baselines),
            stated=c.stated,
        )

    def finish(self) -> "Claim":
        if self.reason and (self.interval is None or self.interval.estimate is None):
            self.verdict = iv.NOT_MEASURABLE
        elif not self.stated:
            self.verdict = iv.NO_VERDICT
            self.reason = "the suite's extension: no version of the paper states it"
        elif self.null is not None:
            self.verdict = iv.verdict(self.interval, self.null, self.direction)
        return self

    def as_dict(self) -> dict:
        d = asdict(self)
        d["interval"] = self.interval.as_dict() if self.interval else None
        d["detectable_effect"] = iv.detectable_effect(self.interval) if self.interval else None
        d["paper_inside_interval"] = (
            self.interval.contains(self.paper_value)
            if self.interval is not None and self.paper_value is not None
            else None
        )
        d["beside"] = {k: (v.as_dict() if isinstance(v, iv.Interval) else v) for k, v in self.beside.items()}
        d["version_label"] = VERSIONS[self.version].label if self.version in VERSIONS else self.version
        return d


def _boot(settings: ReportSettings, statistic, arrays) -> iv.Interval:
    return iv.bootstrap_interval(
        statistic, arrays, confidence=settings.confidence, resamples=settings.resamples, method=settings.interval
    )


def _pairs(frame: pd.DataFrame, task: str, methods: list[str], columns: list[str]) -> pd.DataFrame:
    wide = paired(frame[frame["task"] == task], methods, columns)
    return wide.dropna() if len(wide) else wide


def _against(claim: PaperClaim) -> str:
    """The baseline(s) as the report names them: one method, or the best of several."""
    names = [LABELS[b] for b in claim.baselines]
    return names[0] if len(names) == 1 else f"best of {', '.join(names)}"


def _not_run(frame: pd.DataFrame, task: str, methods) -> list[str]:
    ran = set(frame[frame["task"] == task]["method"])
    return [m for m in methods if m not in ran]


def _columns(wide: pd.DataFrame, methods, columns) -> list:
    return [wide[f"{m}.{c}"] for m in methods for c in columns]


# ----------------------------------------------------------------------------- C1 - C4
def perplexity_claims(frame, tasks, settings, source) -> list[Claim]:
    claims = []
    for task in tasks:
        for paper_claim in claims_of("perplexity"):
            method, base = paper_claim.method, paper_claim.baselines[0]
            claim = Claim.of(paper_claim, f"{LABELS[method]} vs {LABELS[base]}: PPL ratio − 1", task, source)
            wide = _pairs(frame, task, [method, base], ["mean_logprob"])
            if wide.empty:
                claim.reason = f"no prompt finished by both {method} and {base}"
            else:
                claim.interval = _boot(
                    settings, iv.perplexity_change, [wide[f"{method}.mean_logprob"], wide[f"{base}.mean_logprob"]]
                )
            claims.append(claim.finish())
    return claims


def _score_reason(cells: pd.DataFrame, task: str) -> str | None:
    rows = cells[cells["task"] == task]
    for column in [c for c in rows.columns if c.startswith("score.") and c.endswith("missing_reason")]:
        reasons = {r for r in rows[column] if isinstance(r, str) and r}
        if reasons:
            return "; ".join(sorted(reasons))
    return None


def quality_claims(frame, cells, tasks, settings, source) -> list[Claim]:
    claims = []
    for task in tasks:
        scored = frame[(frame["task"] == task) & frame["score"].notna()] if "score" in frame else frame.iloc[0:0]
        score_names = sorted({n for n in cells[cells["task"] == task].get("score_name", []) if isinstance(n, str)})
        what = score_names[0] if score_names else "score"
        methods_here = sorted(set(frame[frame["task"] == task]["method"]))
        for paper_claim in claims_of("quality"):
            method, base = paper_claim.method, paper_claim.baselines[0]
            claim = Claim.of(paper_claim, f"{LABELS[method]} vs {LABELS[base]}: {what} ratio − 1", task, source)
            if scored.empty:
                claim.reason = _score_reason(cells, task) or f"no task score recorded for {task}"
            elif (scored["score"] == 0).all():
                n = scored.groupby("method")["id"].nunique()
                claim.reason = (
                    f"the target scores 0 on every example for every method "
                    f"({', '.join(f'{LABELS.get(m, m)} {n.get(m, 0)}' for m in methods_here)} examples)"
                )
            else:
                wide = _pairs(frame, task, [method, base], ["score"])
                if wide.empty:
                    claim.reason = f"no example scored for both {method} and {base}"
                else:
                    claim.interval = _boot(
                        settings, iv.relative_change, [wide[f"{method}.score"], wide[f"{base}.score"]]
                    )
                    if claim.interval.estimate is None:
                        claim.reason = f"{base} scores 0 on these examples: no relative change"
                    if claim.interval.low is None:  # too few solved for a ratio: the counts say what was seen
                        claim.beside["scores"] = " vs ".join(
                            f"{LABELS[m]} {wide[f'{m}.score'].sum():g} of {len(wide)}" for m in (method, base)
                        )
            claims.append(claim.finish())
    return claims


def speed_claims(frame, tasks, settings, source, timing, params: dict | None = None) -> list[Claim]:
    """Tokens/s of the method over its baseline's (over the fastest baseline's, chosen inside every
    resample, when the paper compares with several), the block-efficiency ratio beside."""
    claims = []
    for task in tasks:
        for paper_claim in claims_of("speed"):
            methods = [paper_claim.method, *paper_claim.baselines]
            claim = Claim.of(
                paper_claim, f"{LABELS[paper_claim.method]} / {_against(paper_claim)}: tokens/s ratio", task, source
            )
            wide = _pairs(frame, task, methods, ["seconds", *COUNT_FIELDS])
            missing = _not_run(frame, task, methods)
            if missing:
                claim.reason = f"not run here: {', '.join(missing)} (add it to claims.methods)"
            elif wide.empty:
                claim.reason = f"no prompt finished by all of {', '.join(methods)}"
            else:
                claim.interval = _boot(settings, iv.rate_over_best, _columns(wide, methods, ["new_tokens", "seconds"]))
                claim.beside["block_efficiency_ratio"] = _boot(
                    settings, iv.rate_over_best, _columns(wide, methods, ["new_tokens", "target_calls"])
                )
                claim.beside["timing"] = timing
                modelled = _modelled_ratio(wide, methods, frame["pair"].iloc[0], params or {})
                if modelled is not None:
                    claim.beside["modelled"] = modelled
            claims.append(claim.finish())
    return claims


def _modelled_ratio(wide: pd.DataFrame, methods: list[str], pair: str, params: dict) -> dict | None:
    """The speed ratio the paired prompts' counts give on a memory-bound accelerator (the method over
    its fastest baseline there; ``mtad.metrics.cost_model``): modelled, never a verdict."""
    if pair not in PAIR_SIZES:
        return None
    profile = accelerator_profile(pair, DEFAULT_ACCELERATOR)

    def counts(method: str) -> Counts:
        totals = {c: wide[f"{method}.{c}"].sum() for c in COUNT_FIELDS}  # the paired prompts' totals
        return Counts.of(totals, params.get(method))

    mine, *baselines = (modelled_tokens_per_s(c, profile) for c in comparable(*map(counts, methods)))
    ratio = mine / max(baselines)
    return {"accelerator": ACCELERATORS[DEFAULT_ACCELERATOR].name, "ratio": ratio}


def _energy_reason(cells: pd.DataFrame) -> str | None:
    reasons = {r for r in cells.get("energy_missing_reason", []) if isinstance(r, str) and r}
    return "; ".join(sorted(reasons)) if reasons else None


def energy_claims(frame, cells, tasks, settings, source) -> list[Claim]:
    """Joules per token of the baseline (the most frugal one, chosen inside every resample, when
    the paper compares with several) over the method's."""
    claims = []
    for task in tasks:
        for paper_claim in claims_of("energy"):
            methods = [paper_claim.method, *paper_claim.baselines]
            claim = Claim.of(
                paper_claim,
                f"{_against(paper_claim)} / {LABELS[paper_claim.method]}: energy per token ratio",
                task,
                source,
            )
            wide = _pairs(
                frame.assign(energy_j=frame["energy_j"].astype(float)), task, methods, ["energy_j", "new_tokens"]
            )
            missing = _not_run(frame, task, methods)
            if missing:
                claim.reason = f"not run here: {', '.join(missing)} (add it to claims.methods)"
            elif wide.empty:
                reason = _energy_reason(cells[cells["task"] == task])
                claim.reason = f"no energy counter: {reason}" if reason else "no prompt with an energy reading for all"
            else:
                claim.interval = _boot(
                    settings, iv.lowest_over_rate, _columns(wide, methods, ["energy_j", "new_tokens"])
                )
            claims.append(claim.finish())
    return claims


# ----------------------------------------------------------------------------- C5, C6
def _tiny(claim: str, comparison: str, paper: str, unit: str, interval: iv.Interval, **fields) -> Claim:
    """A row measured on the enumerable tiny models (no figure in the paper)."""
    return Claim(
        claim=claim,
        comparison=comparison,
        task="tiny model",
        paper=paper,
        paper_value=None,
        unit=unit,
        null=fields.pop("null", None),
        direction=fields.pop("direction", None),
        interval=interval,
        source="tiny model",
        **fields,
    )


DEFINITIONAL = (
    "holds by definition: exact MTJD samples the block from p's joint distribution, which maximises its "
    "expected log-likelihood; the row checks the enumeration, not the paper"
)


def _power(test: dict) -> str:
    """What a test that does not reject can vouch for: the smallest TV it detects at its power."""
    if test.get("detectable_tv") is None:
        return ""
    return f"; detects TV ≥ {test['detectable_tv']:.3f} with {test['power']:.0%} power"


def with_holm(theory: dict, confidence: float = iv.CONFIDENCE) -> dict:
    """theory.json with C5's E[log p] verdicts adjusted for their number: over every (point, method)
    of the grid, each difference's two-sided p-value (normal approximation, `iv.normal_pvalue`) is
    Holm-adjusted (`iv.holm`), and a verdict stands only where the adjusted p is below 1 − confidence
    (else inconclusive). Each method's entry gains `p`, `holm_p` and `holm_verdict`; `holm` says how
    many comparisons the family holds."""
    entries = [m for row in theory.get("approximation", []) for m in row["methods"].values()]
    pvalues = [iv.normal_pvalue(iv.Interval(**m["logp_gain"]), 0.0) for m in entries]
    tested = [(m, p) for m, p in zip(entries, pvalues) if p is not None]
    for (m, p), adjusted in zip(tested, iv.holm([p for _, p in tested])):
        m |= {
            "p": p,
            "holm_p": adjusted,
            "holm_verdict": m["verdict"] if adjusted < 1 - confidence else iv.INCONCLUSIVE,
        }
    return theory | {"holm": {"comparisons": len(tested), "alpha": 1 - confidence}} if theory else theory


def theory_claims(theory: dict) -> list[Claim]:
    """C5 rows at the paper's operating point (the whole grid is in the report's C5 section), the
    zero-distance check, and C6, from a stored ``theory.json`` (``mtad.experiments.theory``)."""
    claims, blocks_done = [], set()
    for row in (r for r in theory["approximation"] if r["point"]["operating"]):
        point, label = row["point"], row["label"]
        if point["draft"] == "q ≠ p" and (point["vocab"], point["gamma"]) not in blocks_done:
            blocks_done.add((point["vocab"], point["gamma"]))
            gain = row["exact"]["mtjd_logp"] - row["exact"]["sampling_logp"]
            comparison = (
                f"exact MTJD − sampling: E[log p] of a {point['gamma']}-token block, V={point['vocab']} "
                "(both enumerated)"
            )
            exact = iv.Interval(gain, gain, gain, method="exact")
            definitional = _tiny("C5", comparison, "MTJD lowers perplexity", "logprob", exact, version="arxiv-v2")
            # exact MTJD draws the block from p's joint distribution, which maximises E[log p] over the
            # block by construction: the row checks the enumeration, not the paper
            definitional.verdict, definitional.reason = iv.NO_VERDICT, DEFINITIONAL
            claims.append(definitional)
        for method in APPROXIMATORS:
            comparison = f"{LABELS[method]} − sampling: E[log p] of the first γ tokens; {label}"
            found = row["methods"][method]
            interval = iv.Interval(**found["logp_gain"])
            version = "arxiv-v2" if method == "mtad" else "iclr-final"
            claim = _tiny(
                "C5", comparison, "lowers perplexity", "logprob", interval, null=0.0, direction=+1, version=version
            ).finish()
            if "holm_p" in found:  # the verdict after Holm over the family (`with_holm`)
                claim.verdict = found["holm_verdict"]
                claim.reason = (
                    f"Holm over C5's {theory['holm']['comparisons']} E[log p] comparisons: adjusted p = "
                    f"{found['holm_p']:.3g} (unadjusted {found['p']:.3g})"
                )
            claims.append(claim)
        if point["draft"] != "q = p" and point["replacement"]:
            for method in APPROXIMATORS:
                comparison = f"TV({LABELS[method]}, MTJD) − TV(sampling, MTJD); {label}"
                interval = iv.Interval(**row["methods"][method]["tv_gain"])
                version = "iclr-final" if method == "mmtad" else "arxiv-v2"
                claims.append(
                    _tiny(
                        "C5",
                        comparison,
                        "bounded error (form not sourced)",
                        "tv",
                        interval,
                        verdict=iv.NO_VERDICT,
                        reason=NO_BOUND,
                        version=version,
                    )
                )
    check = theory["zero_distance_check"]
    comparison = (
        f"distance zero where the maths says so (q = p, W = 1, τ = 0.01, no truncation): "
        f"chi-square p = {check['pvalue']:.3g}{_power(check)}"
    )
    claims.append(
        _tiny(
            "C5",
            comparison,
            "0 (exact)",
            "pvalue",
            iv.Interval(check["pvalue"], n=check["runs"]),
            verdict=check["verdict"],
        )
    )
    for row in theory["exactness"]:
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        comparison = f"{row['method']} ({params}) reproduces p: chi-square p = {row['pvalue']:.3g}{_power(row)}"
        claims.append(
            _tiny(
                "C6",
                comparison,
                "exact (lossless)",
                "pvalue",
                iv.Interval(row["pvalue"], n=row["runs"]),
                verdict=row["verdict"],
            )
        )
    return claims


# ----------------------------------------------------------------------------- the report
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
    cells = cells[cells["overrides"] == ""]
    frame = example_frame(cells)
    tasks = list(settings.tasks or _ordered_tasks(cells))  # planned: absent ones get "not run" rows
    timing = (
        "interleaved within each prompt"
        if "timing" in cells and cells["timing"].notna().any()
        else "one cell after another (not interleaved)"
    )
    claims = perplexity_claims(frame, tasks, settings, experiment) + quality_claims(
        frame, cells, [t for t in tasks if t in PAPER_TASKS], settings, experiment
    )
    evidence_tasks = [t for t in PAPER_TASKS if t not in tasks]
    if settings.zero_score_evidence and evidence_tasks:
        other = load_cells(results_root, experiment=settings.zero_score_evidence)
        other = other[(other["pair"] == pair) & (other["overrides"] == "")] if "pair" in other else other
        found = [t for t in evidence_tasks if t in set(other.get("task", []))]
        if found:
            claims += quality_claims(example_frame(other), other, found, settings, settings.zero_score_evidence)
        evidence_root = Path(results_root) / settings.zero_score_evidence
        for task in (t for t in evidence_tasks if t not in found):
            claims += quality_not_run(task, settings.zero_score_evidence, evidence_root)
    params = {row["method"]: method_params(row) for row in cells.to_dict("records")}  # one cell per method here
    claims += speed_claims(frame, tasks, settings, experiment, timing, params)
    claims += energy_claims(frame, cells, tasks, settings, experiment)
    detail = with_holm(read_json(theory_path(results_root, experiment)), settings.confidence) if theory else {}
    if detail:
        claims += theory_claims(detail)
    elif theory:
        claims += theory_not_run(theory_path(results_root, experiment), experiment)
    coverage = cell_coverage(cells, tasks, settings.methods, pair, Path(results_root) / experiment)
    for claim in claims:
        if claim.source == experiment:
            mark_missing_cells(claim, coverage)
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
        "design": design(cells, frame, tasks),
        "coverage": coverage,
        "claims": [c.as_dict() for c in claims],
        "theory": detail,
    }


def cell_coverage(cells: pd.DataFrame, tasks: list[str], methods: list[str], pair: str, root: Path) -> dict:
    """The cells the experiment plans (its tasks x its claims methods), which of them are present and
    which are missing from the folder read."""
    present = set(zip(cells["task"], cells["method"]))
    planned = [(t, m) for t in tasks for m in methods]
    return {
        "root": str(root),
        "pair": pair,
        "planned": len(planned),
        "present": sum(cell in present for cell in planned),
        "missing": [f"{pair}/{t}/{m}" for t, m in planned if (t, m) not in present],
    }


def mark_missing_cells(claim: Claim, coverage: dict) -> None:
    """A claim that reads a planned cell absent from the root says so: "not run", naming the cells
    (a verdict of its own: nothing was measured, unlike "not measurable here")."""
    absent = [f"{coverage['pair']}/{claim.task}/{m}" for m in claim.methods]
    absent = [cell for cell in absent if cell in coverage["missing"]]
    if absent:
        claim.interval, claim.verdict = None, iv.NOT_RUN
        claim.reason = f"not run: cell(s) {', '.join(absent)} missing from {coverage['root']}"


def quality_not_run(task: str, source: str, root: Path) -> list[Claim]:
    """C2 rows of a task whose cells (from experiment `source`) are absent from the root read."""
    rows = []
    for paper_claim in claims_of("quality"):
        method, base = paper_claim.method, paper_claim.baselines[0]
        what = TASKS[task].primary_score or "score"
        claim = Claim.of(paper_claim, f"{LABELS[method]} vs {LABELS[base]}: {what} ratio − 1", task, source)
        claim.verdict, claim.reason = iv.NOT_RUN, f"not run: no {task} cells of experiment {source} in {root}"
        rows.append(claim)
    return rows


def theory_not_run(path: Path, experiment: str) -> list[Claim]:
    """C5 and C6 rows when their theory.json is absent: every claim row appears in every report."""
    reason = f"not run: {path} missing (`python -m mtad.experiments.claims experiment={experiment}` computes it)"
    return [
        Claim(
            claim,
            comparison,
            "tiny model",
            paper,
            None,
            "logprob",
            None,
            None,
            verdict=iv.NOT_RUN,
            reason=reason,
            source="theory",
        )
        for claim, comparison, paper in (
            ("C5", "MTAD and MMTAD against exact MTJD and sampling", "MTJD lowers perplexity"),
            ("C6", "SpS, SpecTr and SpecInfer reproduce the target distribution", "exact (lossless)"),
        )
    ]


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
    from mtad.report.claims_markdown import to_markdown

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{name}.md", out_dir / f"{name}.json"
    write_if_changed(md, to_markdown(report))
    write_if_changed(js, json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
    return md, js


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
