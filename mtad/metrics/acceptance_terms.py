"""The acceptance figures the reports quote, each once, with its formula.

Three different quantities are called "acceptance" in the literature and in this suite's reports;
every report names them by these labels and prints the formulas of those it shows
(`terms_markdown`), so that no figure is read as another (nor as one of the paper's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    label: str  # what tables and figures call it
    formula: str  # how it is computed
    reads: str  # what it is measured on, and how to read it


ACCEPTANCE_TERMS = {
    "acceptance_rate": Term(
        "accepted / drafted",
        "Σ accepted / Σ drafted over every block (drafted: the chain's γ, or the tree's depth, per block)",
        "measured on a run's generations; drafting stops at a rejection, so it understates the per-token rate",
    ),
    "alpha": Term(
        "per-token α",
        "the α with Σ_{i=1..γ} α^i = the mean accepted length (Leviathan et al.'s i.i.d. model; the bench "
        "solves (1 − α^(γ+1)) / (1 − α) = block efficiency instead, the same model read from the other count)",
        "measured on SpS's generations; comparable across γ and with the papers' α",
    ),
    "e_accept": Term(
        "E[accept] at top-k 10 / top-p 0.9",
        "Σ_x min(p'(x), q'(x)), p' and q' the target's and the draft's distributions processed with top-k 10 / "
        "top-p 0.9 at T = 1, averaged over positions",
        "measured teacher-forced on the target's own answers to held-out requests: the draft's expected "
        "acceptance of one token, free of sampling noise; the suite's measurement, not a figure of the paper",
    ),
    "block_efficiency": Term(
        "block efficiency",
        "Σ new tokens / Σ target calls (bonus tokens included; 1 for sampling)",
        "measured on a run's generations: tokens per target forward",
    ),
}


def terms_markdown(keys: tuple[str, ...] = tuple(ACCEPTANCE_TERMS)) -> list[str]:
    """The glossary lines for the terms a report shows."""
    lines = ["Acceptance figures (`mtad/metrics/acceptance_terms.py`):", ""]
    for key in keys:
        term = ACCEPTANCE_TERMS[key]
        lines.append(f"- **{term.label}** = {term.formula}; {term.reads}.")
    return lines


def per_token_alpha(mean_accepted: float, gamma: int) -> float:
    """The per-token α of the glossary: Σ_{i=1..γ} α^i = `mean_accepted`, the mean accepted length
    of a block of γ drafted tokens (Leviathan et al.'s i.i.d. model, solved by bisection; the sum
    rises with α). Accepted / drafted alone understates α, since drafting stops at the first
    rejection; 0 and γ map to 0 and 1."""
    if mean_accepted <= 0:
        return 0.0
    if mean_accepted >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid**i for i in range(1, gamma + 1)) < mean_accepted else (lo, mid)
    return (lo + hi) / 2
