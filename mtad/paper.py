"""The paper's claims as data: what each states, against what, with which figure, in which version.

The paper exists in versions that give different figures (``VERSIONS``); every claim row names
the version its figure comes from, and a figure is only ever compared with the comparison that
version makes. ``CLAIMS`` is the table the claims report iterates (``mtad.report.claims_report``);
C5 (approximation of exact MTJD) and C6 (the baselines are exact) are computed on enumerable
tiny models (``mtad.experiments.theory``) and have no figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from mtad.decoding.registry import MethodsWhere

CITATION = (
    'Qin et al., "Optimized Multi-Token Joint Decoding with Auxiliary Model for LLM Inference", '
    "arXiv 2407.09722, ICLR 2025"
)


@dataclass(frozen=True)
class PaperVersion:
    key: str
    label: str  # how the report names it
    states: str  # what its abstract states, in short
    addresses: tuple[str, ...] = ()  # where each version of it can be read


VERSIONS = {
    "arxiv-v2": PaperVersion(
        "arxiv-v2",
        "arXiv v2–v4 (MTAD; Llama-2 and OPT 13B–70B)",
        "MTAD lowers perplexity by 21.2% against single-token sampling and improves downstream performance; "
        "it is 1.42× faster and uses 1.54× less energy than conventional speculative decoding methods; MTAD "
        "approximates exact MTJD with a bounded error. Versions 2, 3 and 4 share this abstract; it is also on "
        "the ICLR 2025 poster page.",
        (*(f"https://arxiv.org/abs/2407.09722v{n}" for n in (2, 3, 4)), "https://iclr.cc/virtual/2025/poster/29226"),
    ),
    "iclr-final": PaperVersion(
        "iclr-final",
        "ICLR 2025 camera-ready (MTAD and MMTAD)",
        'MTAD and MMTAD approximate exact MTJD with a bounded error; "our method" improves downstream '
        "performance by 43% against single-token sampling; MTAD is 1.26× faster and uses 23.6% less energy "
        "than vanilla speculative decoding; MMTAD (tree verification of every beam) improves efficiency "
        "further.",
    ),
}
# "conventional speculative decoding methods" (the best of them): the study's lossless methods that draft
# and verify drafts of their own, read from the method registry when first used. A method that verifies
# another's drafts by a newer rule (block verification of SpS's chain) is not one the paper compares
# with: the claims report compares it in rows of its own (claims.comparisons)
CONVENTIONAL = MethodsWhere(lambda spec: spec.lossless and spec.drafts != "none" and not spec.verifies_drafts_of)
# the paper's own methods, spelled here and in their modules alone: MTAD (beams verified as one chain,
# its joint acceptance rule) and MMTAD (every beam verified as a tree)
MTAD, MMTAD = "mtad", "mmtad"
APPROXIMATORS = (MTAD, MMTAD)  # the methods the paper says approximate exact MTJD (C5)
NO_BOUND = "no verdict: the paper's bound could not be sourced"  # C5's distances: the bound's form is unknown


@dataclass(frozen=True)
class PaperClaim:
    """One row of the report: ``method`` against ``baselines`` (several: the best of them)."""

    claim: str  # "C1" ... "C4"
    kind: str  # perplexity | quality | speed | energy
    method: str
    baselines: tuple
    paper: str  # the paper's words, as the report prints them
    figure: float | None  # on the row's scale (None: the version states a direction only)
    version: str  # key of VERSIONS
    unit: str  # "relative" (−0.21 = −21%) or "ratio" (1.42×)
    null: float
    direction: int  # +1: the paper claims above null; −1: below
    # False: no version states it; the row measures the suite's extension of a claim to another
    # method and carries no verdict against the paper
    stated: bool = True


CLAIMS = (
    PaperClaim(
        claim="C1",
        kind="perplexity",
        method="mtad",
        baselines=("sampling",),
        paper="−21.2%",
        figure=-0.212,
        version="arxiv-v2",
        unit="relative",
        null=0.0,
        direction=-1,
    ),
    PaperClaim(
        claim="C1",
        kind="perplexity",
        method="mmtad",
        baselines=("sampling",),
        paper="not stated (the suite's extension of MTAD's claim)",
        figure=None,
        version="iclr-final",
        unit="relative",
        null=0.0,
        direction=-1,
        stated=False,
    ),
    PaperClaim(
        claim="C2",
        kind="quality",
        method="mtad",
        baselines=("sampling",),
        paper='+43% for "our method" (average over tasks)',
        figure=0.43,
        version="iclr-final",
        unit="relative",
        null=0.0,
        direction=+1,
    ),
    PaperClaim(
        claim="C2",
        kind="quality",
        method="mmtad",
        baselines=("sampling",),
        paper='higher: "our method" (no separate figure for MMTAD)',
        figure=None,
        version="iclr-final",
        unit="relative",
        null=0.0,
        direction=+1,
    ),
    PaperClaim(
        claim="C3",
        kind="speed",
        method="mtad",
        baselines=("sps",),
        paper="1.26× over vanilla SpS",
        figure=1.26,
        version="iclr-final",
        unit="ratio",
        null=1.0,
        direction=+1,
    ),
    PaperClaim(
        claim="C3",
        kind="speed",
        method="mtad",
        baselines=CONVENTIONAL,
        paper="1.42× over conventional speculative decoding",
        figure=1.42,
        version="arxiv-v2",
        unit="ratio",
        null=1.0,
        direction=+1,
    ),
    PaperClaim(
        claim="C3",
        kind="speed",
        method="mmtad",
        baselines=("mtad",),
        paper="faster (no separate figure)",
        figure=None,
        version="iclr-final",
        unit="ratio",
        null=1.0,
        direction=+1,
    ),
    # energy rows: the baseline's joules per token over MTAD's; "23.6% less" is 1 / (1 − 0.236) = 1.31×
    PaperClaim(
        claim="C4",
        kind="energy",
        method="mtad",
        baselines=("sps",),
        paper="23.6% less than vanilla SpS (1.31×)",
        figure=1 / (1 - 0.236),
        version="iclr-final",
        unit="ratio",
        null=1.0,
        direction=+1,
    ),
    PaperClaim(
        claim="C4",
        kind="energy",
        method="mtad",
        baselines=CONVENTIONAL,
        paper="1.54× less than conventional speculative decoding",
        figure=1.54,
        version="arxiv-v2",
        unit="ratio",
        null=1.0,
        direction=+1,
    ),
)


def claims_of(kind: str) -> list[PaperClaim]:
    return [c for c in CLAIMS if c.kind == kind]


def methods_needed() -> list[str]:
    """Every method some claim compares."""
    return list(dict.fromkeys(m for c in CLAIMS for m in (c.method, *c.baselines)))
