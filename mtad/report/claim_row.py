"""One row of the claims report (``mtad.report.claims_report``): the paper's figure, ours with its interval,
the verdict or the reason there is none, what stands beside it, and the row as the report's JSON
stores it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mtad.paper import VERSIONS, PaperClaim
from mtad.stats import intervals as iv


@dataclass
class Claim:
    """One row: which claim, what it compares on which prompts, the paper's figure and ours."""

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
