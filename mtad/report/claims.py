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
  defaults, in the rows of the kinds each names: the suite's extension, without a verdict;
- C5 and C6 on enumerable tiny models, as ``mtad.experiments.theory`` computed them.

C1 to C4 are one loop (``kind_claims``) over ``KINDS``: each ``ClaimKind`` declares its claim,
the columns it pairs prompts on, the statistic, its unit, what it puts beside an interval and the
reasons a row is not measurable. The rows, their figures and the paper version each figure comes
from are ``mtad.paper``.

Every interval is a paired bootstrap over prompts (``mtad.stats.intervals``); the verdict rule
is written at the top of the report. Output: ``results/claims/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from mtad.methods import LABELS
from mtad.metrics.cost_model import (
    COUNT_FIELDS,
    Counts,
)
from mtad.paper import APPROXIMATORS, NO_BOUND, VERSIONS, PaperClaim, claims_of, methods_needed
from mtad.records import read_json, write_if_changed
from mtad.report.cells import load_cells
from mtad.report.examples import example_frame, paired
from mtad.report.tables import ACCELERATOR, method_params, modelled_ratio
from mtad.report.values import in_order, is_missing, present
from mtad.runner.layout import REFERENCE_ROOT, override_dirname, theory_path
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
    variants: list = field(default_factory=list)  # methods with options beside their defaults (`Variant`)

    def __post_init__(self):
        # the config gives mappings; a copy of settings (dataclasses.replace) gives Variants
        self.variants = [v if isinstance(v, Variant) else Variant.of(v) for v in self.variants]


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
    methods: tuple = ()  # the methods whose cells it reads (a variant's by its key, `Variant.key`)
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


def _against(claim: PaperClaim, labels: Mapping = LABELS) -> str:
    """The baseline(s) as the report names them: one method, or the best of several."""
    names = [labels[b] for b in claim.baselines]
    return names[0] if len(names) == 1 else f"best of {', '.join(names)}"


def _not_run(frame: pd.DataFrame, task: str, methods) -> list[str]:
    ran = set(frame[frame["task"] == task]["method"])
    return [m for m in methods if m not in ran]


def _columns(wide: pd.DataFrame, methods, columns) -> list:
    return [wide[f"{m}.{c}"] for m in methods for c in columns]


# ----------------------------------------------------------------------------- what C1 - C4 are measured from
@dataclass
class Measured:
    """One experiment's cells as C1 to C4 read them: the per-example rows (``frame``), the cells,
    the report's settings, how the cells were timed, each method's settings (for the cost model)
    and the report's name of each method, variants included (``Variant.key``)."""

    frame: pd.DataFrame
    cells: pd.DataFrame
    settings: ReportSettings
    source: str  # the experiment
    pair: str
    timing: str = ""
    params: dict = field(default_factory=dict)  # method -> its settings
    labels: dict = field(default_factory=lambda: dict(LABELS))

    @classmethod
    def of(cls, cells: pd.DataFrame, settings: ReportSettings, source: str, pair: str, **more) -> "Measured":
        frame = example_frame(cells)
        if "energy_j" in frame:  # None where a window had no reading: NaN, which pairing drops
            frame = frame.assign(energy_j=frame["energy_j"].astype(float))
        return cls(frame, cells, settings, source, pair, **more)

    def label(self, method: str) -> str:
        return self.labels.get(method, method)

    def score_name(self, task: str) -> str:
        """The task's headline score as its cells name it."""
        names = sorted({n for n in self.cells[self.cells["task"] == task].get("score_name", []) if isinstance(n, str)})
        return names[0] if names else "score"

    def scored(self, task: str) -> pd.DataFrame:
        """The task's per-example rows that carry a score."""
        frame = self.frame
        return frame[(frame["task"] == task) & frame["score"].notna()] if "score" in frame else frame.iloc[0:0]


# Why a row has no interval: each check takes (measured, task, methods, paired prompts) and returns
# the reason, or None when it does not apply; a kind's checks run in order and the first reason stands.
def _unpaired(template: str) -> Callable:
    """No prompt has every method's values: `template` names the methods ({0}, {1}, ... or {all})."""

    def check(measured: Measured, task: str, methods: list[str], wide: pd.DataFrame) -> str | None:
        return template.format(*methods, all=", ".join(methods)) if wide.empty else None

    return check


def _not_in_methods(measured: Measured, task: str, methods: list[str], wide: pd.DataFrame) -> str | None:
    missing = _not_run(measured.frame, task, methods)
    return f"not run here: {', '.join(missing)} (add it to claims.methods)" if missing else None


def _score_reason(cells: pd.DataFrame, task: str) -> str | None:
    rows = cells[cells["task"] == task]
    for column in [c for c in rows.columns if c.startswith("score.") and c.endswith("missing_reason")]:
        reasons = {r for r in rows[column] if isinstance(r, str) and r}
        if reasons:
            return "; ".join(sorted(reasons))
    return None


def _no_score(measured: Measured, task: str, methods: list[str], wide: pd.DataFrame) -> str | None:
    if not measured.scored(task).empty:
        return None
    return _score_reason(measured.cells, task) or f"no task score recorded for {task}"


def _zero_scores(measured: Measured, task: str, methods: list[str], wide: pd.DataFrame) -> str | None:
    scored = measured.scored(task)
    if not (scored["score"] == 0).all():
        return None
    n = scored.groupby("method")["id"].nunique()
    here = sorted(set(measured.frame[measured.frame["task"] == task]["method"]))
    return (
        "the target scores 0 on every example for every method "
        f"({', '.join(f'{measured.label(m)} {n.get(m, 0)}' for m in here)} examples)"
    )


def _energy_reason(cells: pd.DataFrame) -> str | None:
    reasons = {r for r in cells.get("energy_missing_reason", []) if isinstance(r, str) and r}
    return "; ".join(sorted(reasons)) if reasons else None


def _no_energy(measured: Measured, task: str, methods: list[str], wide: pd.DataFrame) -> str | None:
    if not wide.empty:
        return None
    reason = _energy_reason(measured.cells[measured.cells["task"] == task])
    return f"no energy counter: {reason}" if reason else "no prompt with an energy reading for all"


# What stands beside an interval: each takes (measured, paired prompts, methods, the interval).
def _scores_beside(measured: Measured, wide: pd.DataFrame, methods: list[str], interval: iv.Interval) -> dict:
    """Where a ratio has no interval (too few solved), the summed scores say what was seen."""
    if interval.low is not None:
        return {}
    return {"scores": " vs ".join(f"{measured.label(m)} {wide[f'{m}.score'].sum():g} of {len(wide)}" for m in methods)}


def _speed_beside(measured: Measured, wide: pd.DataFrame, methods: list[str], interval: iv.Interval) -> dict:
    """The block-efficiency ratio (free of machine load), how the cells were timed, and the ratio the
    counts give on a memory-bound accelerator (modelled)."""
    beside = {
        "block_efficiency_ratio": _boot(
            measured.settings, iv.rate_over_best, _columns(wide, methods, ["new_tokens", "target_calls"])
        ),
        "timing": measured.timing,
    }
    modelled = _modelled_ratio(wide, methods, measured.pair, measured.params)
    return beside if modelled is None else beside | {"modelled": modelled}


def _modelled_ratio(wide: pd.DataFrame, methods: list[str], pair: str, params: dict) -> dict | None:
    """The speed ratio the paired prompts' counts give on a memory-bound accelerator (the method over
    its fastest baseline there; ``mtad.metrics.cost_model``): modelled, never a verdict. Beside the
    ratio it records the fixed cost per layer of a forward that the roofline assumes: memory-bound,
    the bandwidth divides every forward's cost alike and cancels, so the ratio rests on the counts
    (block efficiency, the draft's calls and rows) and on the draft's cost relative to the target's,
    set by the two models' sizes and that assumption, far more than on the accelerator."""

    def counts(method: str) -> Counts:
        totals = {c: wide[f"{method}.{c}"].sum() for c in COUNT_FIELDS}  # the paired prompts' totals
        return Counts.of(totals, params.get(method))

    ratio = modelled_ratio(pair, *map(counts, methods))
    if ratio is None:
        return None
    return {"accelerator": ACCELERATOR.name, "ratio": ratio, "layer_overhead_ms": ACCELERATOR.layer_overhead_ms}


# ----------------------------------------------------------------------------- C1 - C4: one loop over the kinds
@dataclass(frozen=True)
class ClaimKind:
    """How the rows of one kind of claim are measured. Its rows are the paper's claims of that kind
    (``mtad.paper.claims_of``) and the variants that name it, for every task; each row pairs the
    prompts that every method it compares finished with ``columns`` present, and takes
    ``statistic`` over ``measured`` per method (the method's first, then each baseline's)."""

    name: str  # PaperClaim.kind: perplexity | quality | speed | energy
    claim: str  # the claim its rows belong to: C1 ... C4
    comparison: str  # the row's text; {method}, {against} (the baseline or "best of ..."), {score}
    columns: tuple[str, ...]  # per-example columns a prompt needs, for every method, to be paired
    measured: tuple[str, ...]  # the columns the statistic takes, per method
    statistic: Callable  # a paired statistic of mtad.stats.intervals
    unit: str  # of its values: "relative" (−0.21 = −21%) or "ratio" (1.42×)
    null: float  # no effect
    direction: int  # the side its paper claims are on (+1: above null)
    unmeasurable: tuple[Callable, ...]  # why there may be no interval: checks, in order
    undefined: str | None = None  # the reason where the statistic has no estimate ({0}: the method, {1}: base)
    beside: Callable | None = None  # what stands beside the interval
    scored_tasks: bool = False  # rows only for tasks with a headline score (PAPER_TASKS)
    evidence: bool = False  # its paper tasks that this experiment does not run are read from zero_score_evidence

    def rows(self, variants=()) -> list[PaperClaim]:
        """The paper's claims of this kind, then the variants that name it."""
        return [*claims_of(self.name), *(v.paper_claim(self) for v in variants if self.name in v.kinds)]

    def text(self, claim: PaperClaim, score: str, labels: Mapping) -> str:
        return self.comparison.format(
            method=labels.get(claim.method, claim.method), against=_against(claim, labels), score=score
        )


KINDS = (
    ClaimKind(
        "perplexity",
        "C1",
        "{method} vs {against}: PPL ratio − 1",
        columns=("mean_logprob",),
        measured=("mean_logprob",),
        statistic=iv.perplexity_change,
        unit="relative",
        null=0.0,
        direction=-1,
        unmeasurable=(_unpaired("no prompt finished by both {0} and {1}"),),
    ),
    ClaimKind(
        "quality",
        "C2",
        "{method} vs {against}: {score} ratio − 1",
        columns=("score",),
        measured=("score",),
        statistic=iv.relative_change,
        unit="relative",
        null=0.0,
        direction=+1,
        unmeasurable=(_no_score, _zero_scores, _unpaired("no example scored for both {0} and {1}")),
        undefined="{1} scores 0 on these examples: no relative change",
        beside=_scores_beside,
        scored_tasks=True,
        evidence=True,
    ),
    # tokens/s of the method over its fastest baseline's, the fastest chosen inside every resample
    ClaimKind(
        "speed",
        "C3",
        "{method} / {against}: tokens/s ratio",
        columns=("seconds", *COUNT_FIELDS),
        measured=("new_tokens", "seconds"),
        statistic=iv.rate_over_best,
        unit="ratio",
        null=1.0,
        direction=+1,
        unmeasurable=(_not_in_methods, _unpaired("no prompt finished by all of {all}")),
        beside=_speed_beside,
    ),
    # joules per token of the most frugal baseline over the method's, the baseline chosen inside every resample
    ClaimKind(
        "energy",
        "C4",
        "{against} / {method}: energy per token ratio",
        columns=("energy_j", "new_tokens"),
        measured=("energy_j", "new_tokens"),
        statistic=iv.lowest_over_rate,
        unit="ratio",
        null=1.0,
        direction=+1,
        unmeasurable=(_not_in_methods, _no_energy),
    ),
)
KIND_NAMES = tuple(kind.name for kind in KINDS)


def measure(kind: ClaimKind, paper_claim: PaperClaim, task: str, measured: Measured) -> Claim:
    """One row: the paired prompts, the first reason there is no interval, else the interval and
    what stands beside it."""
    methods = [paper_claim.method, *paper_claim.baselines]
    text = kind.text(paper_claim, measured.score_name(task), measured.labels)
    claim = Claim.of(paper_claim, text, task, measured.source)
    wide = _pairs(measured.frame, task, methods, list(kind.columns))
    claim.reason = next(filter(None, (check(measured, task, methods, wide) for check in kind.unmeasurable)), None)
    if claim.reason is None:
        claim.interval = _boot(measured.settings, kind.statistic, _columns(wide, methods, kind.measured))
        if claim.interval.estimate is None and kind.undefined:
            claim.reason = kind.undefined.format(*methods)
        if kind.beside is not None:
            claim.beside.update(kind.beside(measured, wide, methods, claim.interval))
    return claim.finish()


def kind_claims(kind: ClaimKind, measured: Measured, tasks: list[str], variants=()) -> list[Claim]:
    """Every row of ``kind`` for ``tasks`` (those with a score, for a kind that scores), task by task."""
    tasks = [t for t in tasks if t in PAPER_TASKS] if kind.scored_tasks else tasks
    rows = kind.rows(variants)
    return [measure(kind, row, task, measured) for task in tasks for row in rows]


def evidence_claims(kind: ClaimKind, results_root, pair: str, tasks: list[str], settings: ReportSettings) -> list:
    """The rows of the paper tasks this experiment does not run, from the cells of
    ``settings.zero_score_evidence`` (e.g. ``table2``), "not run" where that experiment lacks them."""
    source = settings.zero_score_evidence
    evidence_tasks = [t for t in PAPER_TASKS if t not in tasks]
    if not (kind.evidence and source and evidence_tasks):
        return []
    other = load_cells(results_root, experiment=source)
    other = other[(other["pair"] == pair) & (other["overrides"] == "")] if "pair" in other else other
    found = [t for t in evidence_tasks if t in set(other.get("task", []))]
    claims = kind_claims(kind, Measured.of(other, settings, source, pair), found) if found else []
    root = Path(results_root) / source
    return claims + [c for t in evidence_tasks if t not in found for c in evidence_not_run(kind, t, source, root)]


def evidence_not_run(kind: ClaimKind, task: str, source: str, root: Path) -> list[Claim]:
    """The rows of a task whose cells (from experiment `source`) are absent from the root read."""
    rows = []
    for paper_claim in claims_of(kind.name):
        text = kind.text(paper_claim, TASKS[task].primary_score or "score", LABELS)
        claim = Claim.of(paper_claim, text, task, source)
        claim.verdict, claim.reason = iv.NOT_RUN, f"not run: no {task} cells of experiment {source} in {root}"
        rows.append(claim)
    return rows


# ----------------------------------------------------------------------------- options beside the defaults
EXTENSION = "not stated (the suite's option against its default)"  # the paper column of a variant's rows


@dataclass(frozen=True)
class Variant:
    """A method run with options beside its defaults, in its own cells: the directory ``mtad-run``
    names for those overrides (``<method>/<overrides>``). Its rows compare it with the method's
    default cells in the kinds it names; no version of the paper states them (no verdict)."""

    name: str  # what its label calls it, e.g. "adaptive"
    method: str
    overrides: tuple[str, ...]  # what it changes, as command-line overrides: method.<key>=... or run-level
    kinds: tuple[str, ...]  # the kinds of its rows (KIND_NAMES)

    @classmethod
    def of(cls, spec: Mapping) -> "Variant":
        """A variant from the config's mapping (name, method, overrides, kinds), checked."""
        valid = [f.name for f in fields(cls)]
        if not isinstance(spec, Mapping) or set(spec) != set(valid):
            raise ValueError(f"claims.variants: each variant has exactly the keys {valid}, got {spec!r}")
        variant = cls(spec["name"], spec["method"], tuple(spec["overrides"]), tuple(spec["kinds"]))
        variant.check()
        return variant

    def check(self) -> None:
        problems = {
            f"unknown method {self.method!r}": self.method not in LABELS,
            f"kinds must be among {list(KIND_NAMES)}": not self.kinds or bool(set(self.kinds) - set(KIND_NAMES)),
            "its overrides change nothing generated (no cell of its own)": not self.directory,
        }
        found = [problem for problem, holds in problems.items() if holds]
        if found:
            raise ValueError(f"claims.variants: {self.name!r} ({self.method}): {'; '.join(found)}")

    @property
    def directory(self) -> str:
        """Its cells' directory below the method's, as the runner names overridden cells."""
        return override_dirname(list(self.overrides))

    @property
    def key(self) -> str:
        """Its name among the methods of the report's frames: ``<method>/<overrides>``."""
        return f"{self.method}/{self.directory}"

    @property
    def label(self) -> str:
        settings = ", ".join(o.lstrip("+").removeprefix("method.") for o in self.overrides)
        return f"{LABELS[self.method]} ({self.name}, {settings})"

    def paper_claim(self, kind: ClaimKind) -> PaperClaim:
        """Its row of ``kind``: against the method at its defaults, the suite's extension."""
        return PaperClaim(
            claim=kind.claim,
            kind=kind.name,
            method=self.key,
            baselines=(self.method,),
            paper=EXTENSION,
            figure=None,
            version="",
            unit=kind.unit,
            null=kind.null,
            direction=kind.direction,
            stated=False,
        )


def with_variants(cells: pd.DataFrame, variants) -> pd.DataFrame:
    """The default cells (no overrides) and each variant's cells, a variant's named by its key in
    ``method``, so that its rows pair it with its method like any two methods."""
    default = cells[cells["overrides"] == ""]
    found = [
        cells[(cells["method"] == v.method) & (cells["overrides"] == v.directory)].assign(method=v.key)
        for v in variants
    ]
    found = [part for part in found if not part.empty]
    return pd.concat([default, *found]) if found else default


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
    cells = with_variants(cells, settings.variants)
    tasks = list(settings.tasks or _ordered_tasks(cells))  # planned: absent ones get "not run" rows
    timing = (
        "interleaved within each prompt"
        if "timing" in cells and cells["timing"].notna().any()
        else "one cell after another (not interleaved)"
    )
    params = {row["method"]: method_params(row) for row in cells.to_dict("records")}  # one cell per method here
    measured = Measured.of(cells, settings, experiment, pair, timing=timing, params=params)
    measured.labels |= {v.key: v.label for v in settings.variants}
    claims = []
    for kind in KINDS:
        claims += kind_claims(kind, measured, tasks, settings.variants)
        claims += evidence_claims(kind, results_root, pair, tasks, settings)
    detail = with_holm(read_json(theory_path(results_root, experiment)), settings.confidence) if theory else {}
    if detail:
        claims += theory_claims(detail)
    elif theory:
        claims += theory_not_run(theory_path(results_root, experiment), experiment)
    methods = [*settings.methods, *(v.key for v in settings.variants)]
    coverage = cell_coverage(cells, tasks, methods, pair, Path(results_root) / experiment)
    command = run_command(experiment, pair, results_root, interleaved=bool(settings.tasks))
    for claim in claims:
        if claim.source == experiment:
            mark_missing_cells(claim, coverage, command)
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
