"""Whether seeded draws follow an exact distribution: a chi-square goodness-of-fit test of counts
against the probabilities (`chisquare_exactness`), its power against an alternative
(`chisquare_power`) and the smallest total-variation distance it detects (`detectable_tv`), the
total-variation distance itself (`tv`) and its noise floor at a number of draws (`noise_floor`).
The counts come from `mtad.metrics.exact_enumeration.empirical_counts`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.stats import chi2, chisquare, ncx2

MIN_EXPECTED = 5  # chi-square cells with fewer expected draws are pooled into one


def tv(counts_or_probs: torch.Tensor, probs: torch.Tensor) -> float:
    """Total-variation distance ½ Σ |a − b| between a (normalised) histogram and a distribution."""
    a = counts_or_probs / counts_or_probs.sum()
    return float(0.5 * (a - probs / probs.sum()).abs().sum())


@dataclass(frozen=True)
class ExactnessTest:
    """Chi-square goodness of fit of seeded draws to an exact distribution."""

    pvalue: float
    tv: float
    runs: int
    impossible: int  # draws of a sequence whose exact probability is 0 (then pvalue = 0)
    cells: int = 0  # cells the test compares (those expecting < 5 draws pooled into one)

    def as_dict(self) -> dict:
        return {
            "pvalue": self.pvalue,
            "tv": self.tv,
            "runs": self.runs,
            "impossible": self.impossible,
            "cells": self.cells,
        }


def detectable_tv(runs: int, cells: int, alpha: float, power: float = 0.8) -> float | None:
    """The smallest total-variation distance from the exact law that the chi-square test over
    ``cells`` cells and ``runs`` draws rejects at level ``alpha`` with probability ``power``, in the
    direction hardest to see among those its cells can see (a deviation inside the pooled cell is
    invisible to it). Against q the statistic is noncentral chi-square with λ = runs · Σ (q − p)² / p;
    at a given TV δ, Σ (q − p)² / p is smallest, 4δ², when δ moves between two halves of p's mass,
    so δ* = √(λ* / (4 · runs)) with λ* the noncentrality of ``power`` (Cohen's w = 2δ)."""
    if cells < 2 or runs < 1:
        return None
    df = cells - 1
    critical = chi2.ppf(1 - alpha, df)
    noncentrality = brentq(lambda lam: ncx2.sf(critical, df, lam) - power, 1e-9, 1e6)
    return float(np.sqrt(noncentrality / (4 * runs)))


def chisquare_exactness(counts: torch.Tensor, probs: torch.Tensor) -> ExactnessTest:
    """Pearson's chi-square of ``counts`` against ``probs``; cells expecting fewer than 5 draws
    are pooled into one (the test's approximation needs it), cells of probability 0 must be empty."""
    runs = int(counts.sum())
    expected = probs / probs.sum() * runs
    impossible = int(counts[expected == 0].sum())
    big = expected >= MIN_EXPECTED
    obs = torch.cat([counts[big], counts[~big].sum(0, keepdim=True)])
    exp = torch.cat([expected[big], expected[~big].sum(0, keepdim=True)])
    keep = exp > 0
    if impossible:
        pvalue = 0.0
    elif int(keep.sum()) < 2:
        pvalue = 1.0  # one cell holds all the mass: nothing to test
    else:
        pvalue = float(
            chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item()).pvalue
        )
    return ExactnessTest(pvalue, tv(counts, probs), runs, impossible, int(keep.sum()))


def chisquare_power(probs: torch.Tensor, alternative: torch.Tensor, runs: int, alpha: float) -> float:
    """The probability that `chisquare_exactness` rejects ``probs`` at level ``alpha`` when the ``runs``
    draws come from ``alternative`` (both [K], over the same cells): over its cells (those expecting
    fewer than 5 draws under ``probs`` pooled into one) the statistic is then about noncentral
    chi-square with λ = runs · Σ (a − p)² / p; a draw of a cell ``probs`` gives 0 rejects outright
    (the two taken as independent)."""
    probs, alternative = probs.double() / probs.sum(), alternative.double() / alternative.sum()
    impossible = float(alternative[probs == 0].sum())
    big = probs * runs >= MIN_EXPECTED
    cells = [(probs[big], alternative[big]), (probs[~big].sum(0, keepdim=True), alternative[~big].sum(0, keepdim=True))]
    p, a = (torch.cat(side) for side in zip(*cells))
    keep = p > 0
    df = int(keep.sum()) - 1
    if df < 1:
        return 1 - (1 - impossible) ** runs
    noncentrality = runs * float(((a[keep] - p[keep]) ** 2 / p[keep]).sum())
    detected = float(ncx2.sf(chi2.ppf(1 - alpha, df), df, noncentrality))
    return 1 - (1 - impossible) ** runs * (1 - detected)


def draws_from_counts(counts: torch.Tensor) -> np.ndarray:
    """[runs] the sequence index of every draw (in index order): what a bootstrap resamples."""
    return np.repeat(np.arange(len(counts)), counts.numpy().astype(int))


def tv_of_draws(draws: np.ndarray, probs: np.ndarray, axis: int = -1) -> np.ndarray:
    """TV between the histogram of ``draws`` (sequence indices, along ``axis``) and ``probs``;
    vectorised over the other axes, as scipy.stats.bootstrap calls it."""
    draws = np.moveaxis(np.asarray(draws), axis, -1)
    flat = draws.reshape(-1, draws.shape[-1]).astype(int)
    hist = np.stack([np.bincount(row, minlength=len(probs)) for row in flat]) / flat.shape[-1]  # [B, K]
    return (0.5 * np.abs(hist - probs[None]).sum(-1)).reshape(draws.shape[:-1])


def noise_floor(probs: np.ndarray, runs: int, repeats: int = 200, seed: int = 0) -> float:
    """Mean TV between ``runs`` exact draws from ``probs`` and ``probs`` itself: the distance an
    exact sampler shows at this sample size (the plug-in TV is biased upwards by about this)."""
    rng = np.random.default_rng(seed)
    probs = probs / probs.sum()
    hist = rng.multinomial(runs, probs, size=repeats) / runs  # [repeats, K]
    return float(np.mean(0.5 * np.abs(hist - probs[None]).sum(-1)))
