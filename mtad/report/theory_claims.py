"""C5 and C6 of the claims report (``mtad.report.claims_report``): rows measured on enumerable tiny models,
read from the ``theory.json`` that ``mtad.experiments.theory`` stores (C5's E[log p] verdicts
Holm-adjusted over their family), or "not run" rows where it is absent."""

from __future__ import annotations

from pathlib import Path

from mtad.decoding.registry import label as method_label
from mtad.paper import APPROXIMATORS, MMTAD, MTAD, NO_BOUND
from mtad.report.claim_row import Claim
from mtad.stats import intervals as iv


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
    if test["detectable_tv"] is None:
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
        point = row["point"]
        if point["draft"] == "q ≠ p" and (point["vocab"], point["gamma"]) not in blocks_done:
            blocks_done.add((point["vocab"], point["gamma"]))
            claims.append(_definitional_claim(row))
        claims += _logp_claims(row, theory)
        if point["draft"] != "q = p" and point["replacement"]:
            claims += _tv_claims(row)
    return claims + _chi_square_claims(theory)


def _definitional_claim(row: dict) -> Claim:
    """Exact MTJD's E[log p] over sampling's for a block of the row's γ and V (both enumerated):
    shown without a verdict, since exact MTJD draws the block from p's joint distribution, which
    maximises E[log p] over the block by construction (the row checks the enumeration, not the paper)."""
    point = row["point"]
    gain = row["exact"]["mtjd_logp"] - row["exact"]["sampling_logp"]
    comparison = (
        f"exact MTJD − sampling: E[log p] of a {point['gamma']}-token block, V={point['vocab']} (both enumerated)"
    )
    exact = iv.Interval(gain, gain, gain, method="exact")
    definitional = _tiny("C5", comparison, "MTJD lowers perplexity", "logprob", exact, version="arxiv-v2")
    definitional.verdict, definitional.reason = iv.NO_VERDICT, DEFINITIONAL
    return definitional


def _logp_claims(row: dict, theory: dict) -> list[Claim]:
    """MTAD's and MMTAD's E[log p] of the first γ tokens over sampling's at one point, each verdict the
    one that stands after Holm over the family where ``with_holm`` tested it."""
    claims = []
    for method in APPROXIMATORS:
        comparison = f"{method_label(method)} − sampling: E[log p] of the first γ tokens; {row['label']}"
        found = row["methods"][method]
        interval = iv.Interval(**found["logp_gain"])
        version = "arxiv-v2" if method == MTAD else "iclr-final"
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
    return claims


def _tv_claims(row: dict) -> list[Claim]:
    """MTAD's and MMTAD's distance to exact MTJD over sampling's at one point: no verdict, the
    paper's bound could not be sourced."""
    claims = []
    for method in APPROXIMATORS:
        comparison = f"TV({method_label(method)}, MTJD) − TV(sampling, MTJD); {row['label']}"
        interval = iv.Interval(**row["methods"][method]["tv_gain"])
        version = "iclr-final" if method == MMTAD else "arxiv-v2"
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
    return claims


def _chi_square_claims(theory: dict) -> list[Claim]:
    """The chi-square rows: C5's zero-distance check, then C6's test of each lossless method."""
    check = theory["zero_distance_check"]
    comparison = (
        f"distance zero where the maths says so (q = p, W = 1, τ = 0.01, no truncation): "
        f"chi-square p = {check['pvalue']:.3g}{_power(check)}"
    )
    claims = [_chi_square_claim("C5", comparison, "0 (exact)", check)]
    for row in theory["exactness"]:
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        comparison = f"{row['method']} ({params}) reproduces p: chi-square p = {row['pvalue']:.3g}{_power(row)}"
        claims.append(_chi_square_claim("C6", comparison, "exact (lossless)", row))
    return claims


def _chi_square_claim(claim: str, comparison: str, paper: str, test: dict) -> Claim:
    """A row read off one chi-square test of the tiny models (its p-value over its runs, its verdict)."""
    interval = iv.Interval(test["pvalue"], n=test["runs"])
    return _tiny(claim, comparison, paper, "pvalue", interval, verdict=test["verdict"])


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
