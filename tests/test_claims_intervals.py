"""Paired bootstrap intervals and the verdict rule (mtad.stats.intervals) on synthetic data."""

import numpy as np
import pytest

from mtad.stats import intervals as iv


def paired_speeds(rng, n, true_ratio):
    """Per-prompt tokens and seconds of two methods; method a is `true_ratio` times faster on average.

    Prompts differ a lot in length (shared by both methods, so pairing removes it) and each
    timing has its own noise."""
    tokens = rng.integers(8, 64, size=n).astype(float)
    per_token_b = 0.1 * rng.lognormal(0.0, 0.5, size=n)  # [n] a prompt's cost per token
    seconds_b = tokens * per_token_b * rng.lognormal(0.0, 0.15, size=n)
    seconds_a = tokens * per_token_b / true_ratio * rng.lognormal(0.0, 0.15, size=n)
    return tokens, seconds_a, tokens, seconds_b


def test_interval_covers_a_known_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(1234)
    draws, covered, widths = 200, 0, []
    for i in range(draws):
        data = paired_speeds(rng, n=30, true_ratio=1.3)
        ci = iv.bootstrap_interval(iv.ratio_of_rates, data, resamples=999, seed=i)
        assert ci.available and ci.method == "BCa" and ci.n == 30
        covered += ci.low <= 1.3 <= ci.high  # both methods' seconds share E[noise]: the ratio of totals -> 1.3
        widths.append(ci.high - ci.low)
    coverage = covered / draws
    # binomial s.e. at 0.95 over 200 draws is 0.015: [0.89, 0.99] is four of them; an unpaired or
    # a 50% interval lands far outside (checked below with the same data)
    print(f"coverage {coverage:.3f}, median width {np.median(widths):.3f}")
    assert 0.89 <= coverage <= 0.99, coverage
    assert np.median(widths) < 0.3  # informative, not a trivially wide interval


def test_unpaired_resampling_would_be_wider_than_paired():
    """Pairing is what makes the design powerful: prompts differ in cost far more than the
    methods do, and resampling the methods' prompts independently keeps that spread in the
    interval; the paired interval on the same data is much narrower."""
    from scipy import stats

    rng = np.random.default_rng(7)
    tok_a, sec_a, tok_b, sec_b = paired_speeds(rng, n=40, true_ratio=1.3)
    speed_a, speed_b = tok_a / sec_a, tok_b / sec_b  # [n] per-prompt tokens/s
    paired = iv.bootstrap_interval(iv.ratio_of_means, [speed_a, speed_b], resamples=999)
    unpaired = stats.bootstrap(
        (speed_a, speed_b),
        iv.ratio_of_means,
        paired=False,
        vectorized=True,
        n_resamples=999,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    unpaired_width = unpaired.confidence_interval.high - unpaired.confidence_interval.low
    assert paired.high - paired.low < 0.7 * unpaired_width


def test_zero_effect_is_inconclusive():
    rng = np.random.default_rng(5)
    data = paired_speeds(rng, n=40, true_ratio=1.0)
    ci = iv.bootstrap_interval(iv.ratio_of_rates, data, resamples=1999)
    assert ci.low < 1.0 < ci.high
    assert iv.verdict(ci, null=1.0, direction=+1) == iv.INCONCLUSIVE
    assert iv.verdict(ci, null=1.0, direction=-1) == iv.INCONCLUSIVE
    effect = iv.detectable_effect(ci)
    assert effect == pytest.approx(2.80 * ci.standard_error, rel=0.01) and 0 < effect < 0.3


def test_a_clear_effect_is_reproduced_or_contradicted_by_direction():
    rng = np.random.default_rng(6)
    ci = iv.bootstrap_interval(iv.ratio_of_rates, paired_speeds(rng, n=40, true_ratio=1.5), resamples=1999)
    assert ci.low > 1.0
    assert iv.verdict(ci, null=1.0, direction=+1) == iv.REPRODUCED
    assert iv.verdict(ci, null=1.0, direction=-1) == iv.CONTRADICTED


@pytest.mark.parametrize(
    "low, high, direction, expected",
    [
        (0.10, 0.30, +1, iv.REPRODUCED),
        (0.10, 0.30, -1, iv.CONTRADICTED),
        (-0.30, -0.10, -1, iv.REPRODUCED),
        (-0.30, -0.10, +1, iv.CONTRADICTED),
        (-0.10, 0.20, +1, iv.INCONCLUSIVE),
        (-0.10, 0.20, -1, iv.INCONCLUSIVE),
        (0.0, 0.20, +1, iv.INCONCLUSIVE),  # touching "no effect" does not exclude it
    ],
)
def test_verdict_rule_on_hand_made_intervals(low, high, direction, expected):
    ci = iv.Interval(estimate=(low + high) / 2, low=low, high=high, n=10)
    assert iv.verdict(ci, null=0.0, direction=direction) == expected


def test_verdict_without_an_estimate_or_interval():
    assert iv.verdict(None, 0.0, +1) == iv.NOT_MEASURABLE
    assert iv.verdict(iv.Interval(None, reason="no counter"), 0.0, +1) == iv.NOT_MEASURABLE
    assert iv.verdict(iv.Interval(0.5, n=2, reason="n = 2 < 3"), 0.0, +1) == iv.INCONCLUSIVE
    with pytest.raises(ValueError, match="direction"):
        iv.verdict(iv.Interval(0.5, 0.1, 0.9, 5), 0.0, 0)


def test_small_and_degenerate_samples():
    few = iv.bootstrap_interval(iv.mean, [[1.0, 2.0]])
    assert few.estimate == 1.5 and not few.available and "too few" in few.reason
    zeros = iv.bootstrap_interval(iv.mean, [np.zeros(10)])
    assert (zeros.estimate, zeros.low, zeros.high, zeros.method) == (0.0, 0.0, 0.0, "degenerate")
    undefined = iv.bootstrap_interval(iv.relative_change, [np.ones(5), np.zeros(5)])
    assert undefined.estimate is None and "zero denominator" in undefined.reason
    with pytest.raises(ValueError, match="equal lengths"):
        iv.bootstrap_interval(iv.relative_change, [np.ones(5), np.ones(4)])


def test_perplexity_change_is_the_ratio_of_perplexities_minus_one():
    rng = np.random.default_rng(0)
    a, b = -rng.uniform(0.5, 2.0, 20), -rng.uniform(0.5, 2.0, 20)
    change = iv.perplexity_change(a, b)
    assert change == pytest.approx(iv.perplexity(a) / iv.perplexity(b) - 1)
    ci = iv.bootstrap_interval(iv.perplexity_change, [a, b], resamples=999)
    assert ci.low <= ci.estimate <= ci.high
    # deterministic for a seed: a table rebuilt from the same cells is identical
    assert ci == iv.bootstrap_interval(iv.perplexity_change, [a, b], resamples=999)
