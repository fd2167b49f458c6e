"""Claims C5 (MTAD approximates exact multi-token joint decoding) and C6 (SpS, SpecTr and
SpecInfer are exact), measured on enumerable tiny models: no model pair is loaded.

Both use a random-weight 2-layer Llama over a vocabulary of ``vocab`` tokens as the target p
(seed 0) and another seed of it as the draft q, and the prompt ``PROMPT``; every continuation of
a few tokens can then be enumerated (``mtad.metrics.exactness``).

C5: for each (γ, W, τ) of a grid, MTAD runs ``runs`` times; the distribution of its first γ
tokens is compared with exact MTJD's block distribution (``mtjd_exact``: the joint target
probability of whole blocks, truncated with top-k/top-p at the block level) by their
total-variation distance, with a percentile bootstrap interval over the runs and the distance an
exact sampler shows at this sample size (the noise floor) beside it. The reference is sampling's
block distribution (token by token from p, truncated per token): MTAD approximating MTJD should
bring its blocks closer to MTJD's than plain sampling's are. Sampling's side uses as many exact
draws from its enumerated distribution, so both plug-in distances carry the same upward bias. Where the maths says the distance is
zero (q = p, W = 1, no truncation: the one beam is then drawn from p itself and every block is
accepted for any τ < 1) a chi-square test checks it.

C6: each lossless method's first two tokens against the enumerated target distribution, the
chi-square test of ``tests/test_decoding_exact.py``, reported with its p-value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from mtad.decoding.mtjd_exact import exact_block_distribution
from mtad.decoding.sampling import SAMPLING_PARAMS
from mtad.metrics.exactness import (chisquare_exactness, draws_from_counts, empirical_counts, noise_floor,
                                    sequence_probs, tv, tv_of_draws)
from mtad.report import intervals as iv

PROMPT = torch.tensor([[1, 3, 2]])  # [1, L]
NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}


@dataclass
class TheorySettings:
    """C5's grid: γ, W and τ each varied around ``default`` = (γ, W, τ), for each draft kind."""

    runs: int = 300
    vocab: int = 4
    # the paper's sampling setting, applied per token by MTAD and sampling and to whole blocks by
    # MTJD: with V = 4 it truncates no single token but cuts most blocks, as it does for real LMs
    top_k: int = SAMPLING_PARAMS["top_k"]
    top_p: float = SAMPLING_PARAMS["top_p"]
    gammas: tuple = (1, 2, 3)
    beam_widths: tuple = (1, 2, 4)
    thresholds: tuple = (0.1, 0.5, 0.9)
    default: tuple = (2, 4, 0.5)

    def grid(self) -> list[tuple[str, int, int, float]]:
        """(draft, γ, W, τ): the grid with q = another random model, and the default with q = p."""
        g0, w0, t0 = self.default
        points = [(g, w0, t0) for g in self.gammas] + [(g0, w, t0) for w in self.beam_widths] + \
            [(g0, w0, t) for t in self.thresholds]
        return [("other", *p) for p in dict.fromkeys(points)] + [("target", g0, w0, t0)]


@dataclass
class ExactnessSettings:
    runs: int = 500
    alpha: float = 0.01
    vocab: int = 4
    tokens: int = 2
    processing: dict = field(default_factory=lambda: {"temperature": 1.0, "top_k": 3, "top_p": 0.9})
    cases: tuple = (("sps", {"gamma": 2}), ("spectr", {"gamma": 2, "num_drafts": 3}),
                    ("specinfer", {"k_config": (3, 2), "replacement": True}),
                    ("specinfer", {"k_config": (3, 2), "replacement": False}))


def tiny_pair(vocab: int):
    from mtad.models.tiny import tiny_model

    return tiny_model("llama", vocab, seed=0), tiny_model("llama", vocab, seed=1)


def approximation_rows(settings: TheorySettings, confidence: float = iv.CONFIDENCE,
                       resamples: int = 2000) -> list[dict]:
    """One C5 row per grid point (and the q = p, W = 1 exactness check)."""
    target, other = tiny_pair(settings.vocab)
    processing = {"temperature": 1.0, "top_k": settings.top_k, "top_p": settings.top_p}
    rng = np.random.default_rng(0)
    rows = []
    for draft_kind, gamma, width, threshold in settings.grid():
        draft = target if draft_kind == "target" else other
        _, mtjd = exact_block_distribution(target, PROMPT[0], gamma, **processing)
        mtjd = mtjd.double()
        sampling = sequence_probs(target, PROMPT, gamma, processing).numpy()
        params = {"gamma": gamma, "beam_width": width, "threshold": threshold, **processing}
        counts = empirical_counts("mtad", target, draft, params, PROMPT, gamma, settings.runs)
        probs = mtjd.numpy()
        mtad_draws = draws_from_counts(counts)
        # as many exact draws of sampling's blocks (enumerated, so no decoder run is needed): both
        # plug-in distances then carry the same finite-sample bias, and their difference does not
        sampling_draws = rng.choice(len(sampling), size=settings.runs, p=sampling / sampling.sum())
        distance = iv.bootstrap_interval(lambda d, axis=-1: tv_of_draws(d, probs, axis), [mtad_draws],
                                         method="percentile", resamples=resamples, confidence=confidence)
        closer = iv.bootstrap_interval(
            lambda a, b, axis=-1: tv_of_draws(a, probs, axis) - tv_of_draws(b, probs, axis),
            [mtad_draws, sampling_draws], method="percentile", resamples=resamples, confidence=confidence)
        rows.append({"draft": "q = p" if draft_kind == "target" else "q ≠ p", "gamma": gamma, "beam_width": width,
                     "threshold": threshold, "runs": settings.runs, "tv_mtad_mtjd": distance.as_dict(),
                     "tv_sampling_mtjd": tv(torch.from_numpy(sampling), mtjd), "noise_floor": noise_floor(probs, settings.runs),
                     "difference": closer.as_dict(), "verdict": iv.verdict(closer, null=0.0, direction=-1)})
    return rows


def zero_distance_check(settings: TheorySettings, alpha: float) -> dict:
    """q = p, W = 1, no truncation, τ → 0: MTAD's first γ tokens are drawn from the joint p,
    which is exact MTJD without truncation; a chi-square test must not reject."""
    target, _ = tiny_pair(settings.vocab)
    gamma = settings.default[0]
    params = {"gamma": gamma, "beam_width": 1, "threshold": 0.01, **NO_TRUNCATION}
    counts = empirical_counts("mtad", target, target, params, PROMPT, gamma, settings.runs)
    _, mtjd = exact_block_distribution(target, PROMPT[0], gamma, **NO_TRUNCATION)
    test = chisquare_exactness(counts, mtjd.double())
    return {"gamma": gamma, "beam_width": 1, "threshold": 0.01, "draft": "q = p", "processing": "none",
            **test.as_dict(), "alpha": alpha,
            "verdict": iv.REPRODUCED if test.pvalue > alpha else iv.CONTRADICTED}


def exactness_rows(settings: ExactnessSettings) -> list[dict]:
    """C6: one chi-square test per lossless method configuration."""
    target, draft = tiny_pair(settings.vocab)
    probs = sequence_probs(target, PROMPT, settings.tokens, settings.processing)
    rows = []
    for method, params in settings.cases:
        counts = empirical_counts(method, target, draft, {**params, **settings.processing}, PROMPT,
                                  settings.tokens, settings.runs)
        test = chisquare_exactness(counts, probs)
        rows.append({"method": method, "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                     "processing": dict(settings.processing), "tokens": settings.tokens, **test.as_dict(),
                     "alpha": settings.alpha,
                     "verdict": iv.REPRODUCED if test.pvalue > settings.alpha else iv.CONTRADICTED})
    return rows

