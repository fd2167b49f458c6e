"""Whether two measurements of one figure agree, with every comparison of a family at once.

Two readings of the same experiment (two machines, two runs) agree on a figure when their
difference is within sampling noise. With m comparisons each is made at level α/m (Bonferroni),
so two runs that measure the same thing show any disagreement at all with probability ≤ α.
"""

from __future__ import annotations

import math

from scipy import stats

ALPHA = 0.05


def bonferroni_confidence(alpha: float, comparisons: int) -> float:
    """The confidence of each of ``comparisons`` intervals so the family errs with probability ≤ α."""
    return 1 - alpha / max(comparisons, 1)


def bonferroni_z(alpha: float, comparisons: int) -> float:
    """The two-sided normal quantile z_{1−α/(2m)} of each of m comparisons."""
    return float(stats.norm.ppf(1 - alpha / (2 * max(comparisons, 1))))


def estimates_agree(a: dict, b: dict, z: float) -> tuple[bool | None, float | None, float | None]:
    """(agree, low, high) for two estimates given as interval dicts (estimate, standard_error, low,
    high): within z·√(se_a² + se_b²) of each other (low/high: that allowed band around 0) when both
    have standard errors, else whether the two intervals overlap; None when neither is possible."""
    ea, eb = a.get("estimate"), b.get("estimate")
    if ea is None or eb is None:
        return None, None, None
    sa, sb = a.get("standard_error"), b.get("standard_error")
    if sa is not None and sb is not None:
        allowed = z * math.hypot(sa, sb)  # the difference of independent estimates: variances add
        return abs(ea - eb) <= allowed, -allowed, allowed
    if None not in (a.get("low"), a.get("high"), b.get("low"), b.get("high")):
        return a["low"] <= b["high"] and b["low"] <= a["high"], None, None
    return None, None, None
