"""Paired bootstrap intervals, detectable effects and the verdict rule of the claims report.

Every comparison in this suite is *paired over prompts*: each method ran on the same prompts
with the same per-sample seeds, so one bootstrap resample draws prompt indices once and takes
every method's values at those prompts (``scipy.stats.bootstrap(..., paired=True)``). What
differs between prompts (length, difficulty, machine load at that moment) then cancels inside
each resample instead of widening the interval.

    from mtad.stats import intervals as iv
    ci = iv.bootstrap_interval(iv.ratio_of_rates, [tok_a, sec_a, tok_b, sec_b])  # tokens/s ratio
    ci.estimate, ci.low, ci.high, ci.n
    iv.verdict(ci, null=1.0, direction=+1)    # "reproduced" / "contradicted" / "inconclusive" / ...

Statistics take numpy arrays and an ``axis`` (scipy passes resamples stacked on the leading
axes, so each must reduce along ``axis`` only). Intervals are BCa (bias-corrected and
accelerated) by default; where BCa is undefined (e.g. every resample equal) they fall back to
the percentile interval, and the method used is recorded.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 9999
MIN_N = 3  # fewer prompts than this: no interval is given (a 2-point bootstrap is [min, max])
POWER = 0.80

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURABLE = (
    "reproduced",
    "contradicted",
    "inconclusive",
    "not measurable here",
)
NO_VERDICT = "no verdict"  # measured, but the paper's statement to test it against is not known
NOT_RUN = "not run"  # a cell the experiment plans is absent from the results root read
VERDICT_RULE = (
    '**reproduced**: the 95% confidence interval excludes "no effect" on the side the paper claims; '
    '**contradicted**: it excludes "no effect" on the opposite side; **inconclusive**: it contains '
    '"no effect"; **not measurable here**: this machine or model cannot measure it (the reason is given); '
    "**no verdict**: measured, but the paper's statement it would be tested against could not be sourced; "
    "**not run**: a cell the experiment plans is missing from the results read (the cell is named). "
    "The verdict is about the direction of the effect; the paper's figure is shown beside ours, and "
    "whether it lies inside our interval is stated separately."
)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval (``low``/``high`` None when there is none)."""

    estimate: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    confidence: float = CONFIDENCE
    standard_error: float | None = None
    method: str | None = None  # "BCa", "percentile", or "degenerate" (every resample equal)
    reason: str | None = None  # why there is no estimate or no interval

    @property
    def available(self) -> bool:
        return self.low is not None and self.high is not None

    def contains(self, value: float) -> bool | None:
        return None if not self.available else bool(self.low <= value <= self.high)

    def as_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- statistics
def mean(x, axis=-1):
    return np.mean(x, axis=axis)


def rate(numerator, denominator, axis=-1):
    """Ratio of totals, e.g. Σ tokens / Σ seconds (long outputs weigh by their tokens)."""
    return np.sum(numerator, axis=axis) / np.sum(denominator, axis=axis)


def ratio_of_rates(num_a, den_a, num_b, den_b, axis=-1):
    """(Σ num_a / Σ den_a) / (Σ num_b / Σ den_b): e.g. tokens/s of method a over method b."""
    return rate(num_a, den_a, axis) / rate(num_b, den_b, axis)


def rate_over_best(*arrays, axis=-1):
    """(Σ a_num / Σ a_den) over the highest of the baselines' rates; arrays are the method's
    (num, den) then each baseline's, e.g. tokens/s of MTAD over the fastest of SpS, SpecTr and
    SpecInfer, the fastest chosen inside every resample."""
    rates = [rate(arrays[i], arrays[i + 1], axis) for i in range(0, len(arrays), 2)]
    return rates[0] / np.max(np.stack(rates[1:]), axis=0)


def lowest_over_rate(*arrays, axis=-1):
    """The lowest of the baselines' rates over the method's (arrays as ``rate_over_best``), e.g. the
    joules per token of the most frugal baseline over MTAD's."""
    rates = [rate(arrays[i], arrays[i + 1], axis) for i in range(0, len(arrays), 2)]
    return np.min(np.stack(rates[1:]), axis=0) / rates[0]


def ratio_of_means(a, b, axis=-1):
    return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def relative_change(a, b, axis=-1):
    """mean(a) / mean(b) − 1: e.g. a task score's change over the baseline's (+0.43 = 43% higher)."""
    return np.mean(a, axis=axis) / np.mean(b, axis=axis) - 1.0


def perplexity(mean_logprob, axis=-1):
    """exp(−mean over samples of each sample's mean log-prob per token): the suite's perplexity."""
    return np.exp(-np.mean(mean_logprob, axis=axis))


def perplexity_change(logprob_a, logprob_b, axis=-1):
    """PPL_a / PPL_b − 1 = exp(mean(lp_b) − mean(lp_a)) − 1 (−0.212 = 21.2% lower perplexity)."""
    return np.exp(np.mean(logprob_b, axis=axis) - np.mean(logprob_a, axis=axis)) - 1.0


# ----------------------------------------------------------------------------- intervals
def bootstrap_interval(
    statistic: Callable,
    samples: Sequence,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    method: str = "BCa",
    seed: int = 0,
    min_n: int = MIN_N,
) -> Interval:
    """The statistic on ``samples`` (equal-length arrays, one value per prompt, paired by position)
    and its paired bootstrap interval. Deterministic for a given ``seed``."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = len(arrays[0]) if arrays else 0
    if any(len(a) != n for a in arrays):
        raise ValueError(f"paired samples need equal lengths, got {[len(a) for a in arrays]}")
    if n == 0:
        return Interval(None, n=0, confidence=confidence, reason="no prompts")
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = float(statistic(*arrays, axis=-1))
    if not math.isfinite(estimate):
        return Interval(None, n=n, confidence=confidence, reason="undefined on these data (a zero denominator)")
    if n < min_n:
        return Interval(estimate, n=n, confidence=confidence, reason=f"n = {n} < {min_n}: too few for an interval")
    for how in dict.fromkeys([method, "percentile"]):
        result = _scipy_bootstrap(statistic, arrays, confidence, resamples, how, seed)
        distribution = result.bootstrap_distribution
        if np.all(distribution == distribution.flat[0]):  # e.g. every prompt scored 0 for both methods
            return Interval(estimate, estimate, estimate, n, confidence, 0.0, "degenerate")
        low, high = (float(v) for v in result.confidence_interval)
        if math.isfinite(low) and math.isfinite(high):
            return Interval(estimate, low, high, n, confidence, _finite_or_none(result.standard_error), how)
    return Interval(
        estimate, n=n, confidence=confidence, reason="undefined on some resamples (a zero denominator): no interval"
    )


def _scipy_bootstrap(statistic, arrays, confidence, resamples, how, seed):
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")  # degenerate data: handled by the caller from the NaN interval
        return stats.bootstrap(
            arrays,
            statistic,
            paired=True,
            vectorized=True,
            n_resamples=resamples,
            confidence_level=confidence,
            method=how,
            rng=np.random.default_rng(seed),
        )


def _finite_or_none(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def detectable_effect(interval: Interval, power: float = POWER) -> float | None:
    """The smallest true effect (on the statistic's scale, away from its null) that this design
    detects with probability ``power`` at the interval's confidence, by the normal approximation
    (z_{1−α/2} + z_{power}) · standard error; about 2.8 standard errors at 95% / 80%."""
    if interval.standard_error is None:
        return None
    alpha = 1.0 - interval.confidence
    return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * interval.standard_error)


def normal_pvalue(interval: Interval, null: float) -> float | None:
    """Two-sided p-value of "the statistic equals ``null``" from the estimate and its standard
    error (the normal approximation the detectable effect uses too); None without a standard error."""
    if interval.estimate is None or not interval.standard_error:
        return None
    return float(2 * stats.norm.sf(abs(interval.estimate - null) / interval.standard_error))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values, in their order: the i-th smallest is
    multiplied by (m − i + 1), made monotone, capped at 1. Rejecting where the adjusted p < α keeps
    the chance of any false rejection in the family at most α."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# ----------------------------------------------------------------------------- verdicts
def verdict(interval: Interval | None, null: float, direction: int) -> str:
    """The verdict rule (``VERDICT_RULE``): ``direction`` +1 when the paper claims the statistic
    is above ``null`` (e.g. a speed-up above 1), −1 when below (e.g. a perplexity change below 0)."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    if interval is None or interval.estimate is None:
        return NOT_MEASURABLE
    if not interval.available:
        return INCONCLUSIVE
    above, below = interval.low > null, interval.high < null
    if (above and direction > 0) or (below and direction < 0):
        return REPRODUCED
    if above or below:
        return CONTRADICTED
    return INCONCLUSIVE
