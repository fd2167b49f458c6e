"""C1 to C4 of the claims report (``mtad.report.claims_report``): one loop (``kind_claims``) over ``KINDS``.

Each ``ClaimKind`` declares its claim, the columns it pairs prompts on, the statistic, its unit,
what it puts beside an interval and the reasons a row is not measurable; its rows are the paper's
claims of that kind (``mtad.paper``) for every task, measured from one experiment's cells
(``Measured``). Beside them, the experiment's ``variants`` (``Variant``: a method with options, in
its own cells) against the method at its defaults, and its ``comparisons`` (``Comparison``: a
method the paper does not run against another, both at their defaults), in the rows of the kinds
each names, without a verdict; and the rows of paper tasks the experiment does not run, from
another experiment's cells (``evidence_claims``). ``ReportSettings`` holds what the report reads
and how it tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from mtad.decoding.registry import labels as method_labels
from mtad.metrics.cost_model import COUNT_FIELDS, Counts
from mtad.paper import PaperClaim, claims_of, methods_needed
from mtad.report.cells import load_cells
from mtad.report.claim_row import Claim
from mtad.report.examples import example_frame, paired
from mtad.report.tables import ACCELERATOR, modelled_ratio
from mtad.runner.layout import override_dirname
from mtad.stats import intervals as iv
from mtad.tasks import TASKS

PAPER_TASKS = tuple(name for name, task in TASKS.items() if task.primary_score)  # the tasks with a score


@dataclass
class ReportSettings:
    """What the report reads and how it tests: the report's keys of an experiment's ``claims:``
    section (``mtad.experiments.claims.ClaimsSettings`` reads the whole section)."""

    methods: list = field(default_factory=methods_needed)  # every method some claim compares
    tasks: list | None = None  # the planned tasks (absent cells get "not run" rows); None: those the cells hold
    zero_score_evidence: str | None = None  # experiment whose cells speak for paper tasks not run here
    confidence: float = iv.CONFIDENCE
    resamples: int = iv.RESAMPLES
    interval: str = "BCa"
    variants: list = field(default_factory=list)  # methods with options beside their defaults (`Variant`)
    comparisons: list = field(
        default_factory=list
    )  # two methods at their defaults, one against the other (`Comparison`)

    def __post_init__(self):
        if isinstance(self.methods, str):  # ${methods:study} gives the registry's names comma-separated
            self.methods = self.methods.split(",")
        # the config gives mappings; a copy of settings (dataclasses.replace) gives Variants and Comparisons
        self.variants = [v if isinstance(v, Variant) else Variant.of(v) for v in self.variants]
        self.comparisons = [c if isinstance(c, Comparison) else Comparison.of(c) for c in self.comparisons]

    @property
    def extensions(self) -> list:
        """The rows beside the paper's claims: the variants', then the comparisons'."""
        return [*self.variants, *self.comparisons]

    @property
    def unregistered(self) -> list[str]:
        """The methods some comparison names that no module registers here: their rows are not run."""
        known = method_labels()
        return list(dict.fromkeys(m for c in self.comparisons for m in c.methods if m not in known))

    @property
    def planned_methods(self) -> list[str]:
        """The methods run at their defaults: ``methods``, then each registered method a comparison
        names that they lack (the comparison's cells are those methods' default cells)."""
        named = [m for c in self.comparisons for m in c.methods if m not in self.unregistered]
        return list(dict.fromkeys([*self.methods, *named]))


def _boot(settings: ReportSettings, statistic, arrays) -> iv.Interval:
    return iv.bootstrap_interval(
        statistic, arrays, confidence=settings.confidence, resamples=settings.resamples, method=settings.interval
    )


def _pairs(frame: pd.DataFrame, task: str, methods: list[str], columns: list[str]) -> pd.DataFrame:
    wide = paired(frame[frame["task"] == task], methods, columns)
    return wide.dropna() if len(wide) else wide


def _against(claim: PaperClaim, labels: Mapping | None = None) -> str:
    """The baseline(s) as the report names them: one method, or the best of several."""
    labels = labels or method_labels()
    names = [labels.get(b, b) for b in claim.baselines]  # an unregistered one by its name
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
    the report's settings, how the cells were timed and the report's name of each method, variants
    included (``Variant.key``)."""

    frame: pd.DataFrame
    cells: pd.DataFrame
    settings: ReportSettings
    source: str  # the experiment
    pair: str
    timing: str = ""
    labels: dict = field(default_factory=method_labels)

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
    modelled = _modelled_ratio(wide, methods, measured.pair)
    return beside if modelled is None else beside | {"modelled": modelled}


def _modelled_ratio(wide: pd.DataFrame, methods: list[str], pair: str) -> dict | None:
    """The speed ratio the paired prompts' counts give on a memory-bound accelerator (the method over
    its fastest baseline there; ``mtad.metrics.cost_model``): modelled, never a verdict. Beside the
    ratio it records the fixed cost per layer of a forward that the roofline assumes: memory-bound,
    the bandwidth divides every forward's cost alike and cancels, so the ratio rests on the counts
    (block efficiency, the draft's calls and rows) and on the draft's cost relative to the target's,
    set by the two models' sizes and that assumption, far more than on the accelerator."""

    def counts(method: str) -> Counts:
        totals = {c: wide[f"{method}.{c}"].sum() for c in COUNT_FIELDS}  # the paired prompts' totals
        return Counts.of(totals)

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

    def rows(self, extensions=()) -> list[PaperClaim]:
        """The paper's claims of this kind, then the extensions (variants, comparisons) that name it."""
        return [*claims_of(self.name), *(e.paper_claim(self) for e in extensions if self.name in e.kinds)]

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


def kind_claims(kind: ClaimKind, measured: Measured, tasks: list[str], extensions=()) -> list[Claim]:
    """Every row of ``kind`` for ``tasks`` (those with a score, for a kind that scores), task by task:
    the paper's, then those of the ``extensions`` (variants, comparisons) that name the kind."""
    tasks = [t for t in tasks if t in PAPER_TASKS] if kind.scored_tasks else tasks
    rows = kind.rows(extensions)
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
        text = kind.text(paper_claim, TASKS[task].primary_score or "score", method_labels())
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
            f"unknown method {self.method!r}": self.method not in method_labels(),
            KINDS_PROBLEM: _bad_kinds(self.kinds),
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
        return f"{method_labels()[self.method]} ({self.name}, {settings})"

    def paper_claim(self, kind: ClaimKind) -> PaperClaim:
        """Its row of ``kind``: against the method at its defaults, the suite's extension."""
        return extension_claim(kind, self.key, self.method, EXTENSION)


@dataclass(frozen=True)
class Comparison:
    """A method against another, both at their defaults, on the same prompts (their default cells):
    rows of the kinds it names that no version of the paper states (no verdict), e.g. a method the
    paper does not run against one it does. A method no module registers here (its module absent)
    is allowed: the rows that need it are "not run" and the report names it (``unregistered``)."""

    name: str  # what its rows measure, in the paper column: "not stated (<name>)"
    method: str
    against: str
    kinds: tuple[str, ...]  # the kinds of its rows (KIND_NAMES)

    @classmethod
    def of(cls, spec: Mapping) -> "Comparison":
        """A comparison from the config's mapping (name, method, against, kinds), checked."""
        valid = [f.name for f in fields(cls)]
        if not isinstance(spec, Mapping) or set(spec) != set(valid):
            raise ValueError(f"claims.comparisons: each comparison has exactly the keys {valid}, got {spec!r}")
        comparison = cls(spec["name"], spec["method"], spec["against"], tuple(spec["kinds"]))
        problems = {
            KINDS_PROBLEM: _bad_kinds(comparison.kinds),
            "a method against itself": len(set(comparison.methods)) < 2,
        }
        found = [problem for problem, holds in problems.items() if holds]
        if found:
            raise ValueError(f"claims.comparisons: {comparison.name!r} ({comparison.method}): {'; '.join(found)}")
        return comparison

    @property
    def methods(self) -> tuple[str, str]:
        return (self.method, self.against)

    def paper_claim(self, kind: ClaimKind) -> PaperClaim:
        """Its row of ``kind``: the method against the other, the suite's extension."""
        return extension_claim(kind, self.method, self.against, f"not stated ({self.name})")


KINDS_PROBLEM = f"kinds must be among {list(KIND_NAMES)}"


def _bad_kinds(kinds) -> bool:
    return not kinds or bool(set(kinds) - set(KIND_NAMES))


def extension_claim(kind: ClaimKind, method: str, against: str, paper: str) -> PaperClaim:
    """A row of ``kind`` that no version of the paper states: ``method`` against ``against``."""
    return PaperClaim(
        claim=kind.claim,
        kind=kind.name,
        method=method,
        baselines=(against,),
        paper=paper,
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
