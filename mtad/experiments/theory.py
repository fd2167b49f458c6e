"""Claims C5 (MTAD and MMTAD approximate exact multi-token joint decoding) and C6 (SpS, SpecTr
and SpecInfer are exact), measured on enumerable tiny models: no model pair is loaded.

Both use a random-weight 2-layer Llama over a vocabulary of V tokens as the target p (seed 0)
and another seed of it as the draft q, and the prompt ``PROMPT``; every continuation of a few
tokens can then be enumerated (``mtad.metrics.exact_enumeration``).

C5, at every point of ``TheorySettings.points`` (the paper's operating point γ = 4, W = 4,
τ = 0.5 and 0.3 with V = 8, beams drawn with and without replacement; a grid around γ = 2 with
V = 16, where top-k 10 truncates single tokens too; q = p at the operating point):

- **what MTJD is for**: the expected raw target joint log-likelihood E[log p(x_1..x_γ)] of the
  first γ tokens emitted, exact for sampling and for exact MTJD (both enumerated), and for MTAD
  and MMTAD over ``runs`` seeded generations with a bootstrap interval. The paper states that
  MTJD lowers perplexity and that MTAD and MMTAD do too: verdicts on MTJD − sampling (exact),
  MTAD − sampling and MMTAD − sampling (intervals) test that;
- **the approximation**: TV to exact MTJD's block law of MTAD's, MMTAD's and sampling's, with
  the noise floor an exact sampler shows at this sample size. The paper's error bound itself
  could not be sourced (``mtad/decoding/README.md``), so the distances carry no verdict.

Exact MTJD here is the joint target distribution of γ-token blocks with temperature, top-k and
top-p applied to whole blocks (``mtad.decoding.mtjd_exact``); without truncation it is the law
of token-by-token sampling, which is why V must be large enough for top-k to cut.

C6: each lossless method's first three tokens (at γ = 2 they include the bonus token) against the
enumerated target distribution, the chi-square test of ``tests/test_decoding_exact.py``, reported
with its p-value.

``run_theory`` computes all of it and ``write_theory`` stores it as
``<results_root>/<experiment>/theory.json`` (``runner.layout.theory_path``; with the environment
and the settings), the file
the claims report reads; ``stored_theory`` returns a stored result whose settings match, so a
rerun computes nothing again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mtad.decoding.logits import logits_to_probs
from mtad.decoding.mtjd_exact import exact_block_distribution, joint_block_logprobs
from mtad.decoding.registry import exactness_cases
from mtad.decoding.sampling import SAMPLING_PARAMS
from mtad.metrics.exact_enumeration import empirical_counts, sequence_probs
from mtad.paper import APPROXIMATORS, MTAD
from mtad.stats import intervals as iv
from mtad.stats.goodness_of_fit import (
    chisquare_exactness,
    detectable_tv,
    draws_from_counts,
    noise_floor,
    tv,
    tv_of_draws,
)

PROMPT = torch.tensor([[1, 3, 2]])  # [1, L]
NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}


@dataclass(frozen=True)
class TheoryPoint:
    draft: str  # "q ≠ p" (another random model), "q = p", or "TV 0.1" (a draft at that per-token distance)
    vocab: int
    gamma: int
    beam_width: int
    threshold: float
    replacement: bool
    operating: bool  # the paper's operating point (γ = 4, W = 4, τ ∈ {0.5, 0.3})

    def label(self) -> str:
        return (
            f"{self.draft}, V={self.vocab}, γ={self.gamma}, W={self.beam_width}, τ={self.threshold}, "
            f"{'with' if self.replacement else 'without'} replacement"
        )


@dataclass
class TheorySettings:
    """C5's points: the operating point (each threshold, with and without replacement, q = p, and
    drafts at the per-token distances ``distances`` from p) over ``operating_vocab`` tokens; γ, W and
    τ varied one at a time around ``default`` over ``grid_vocab`` tokens, beams with replacement
    (the official setting)."""

    runs: int = 400
    top_k: int = SAMPLING_PARAMS["top_k"]
    top_p: float = SAMPLING_PARAMS["top_p"]
    operating_vocab: int = 8
    operating: tuple = (4, 4)  # (γ, W)
    operating_thresholds: tuple = (0.5, 0.3)
    replacements: tuple = (True, False)
    grid_vocab: int = 16
    gammas: tuple = (1, 2, 3)
    beam_widths: tuple = (1, 2, 4)
    thresholds: tuple = (0.1, 0.5, 0.9)
    default: tuple = (2, 4, 0.5)
    vocab: int = 4  # the zero-distance check's vocabulary
    distances: tuple = (0.1, 0.3)  # drafts that mostly agree with p: mean per-token TV (draft_at_distance)

    def points(self) -> list[TheoryPoint]:
        (g_op, w_op), v_op = self.operating, self.operating_vocab
        points = [
            TheoryPoint("q ≠ p", v_op, g_op, w_op, t, r, True)
            for t in self.operating_thresholds
            for r in self.replacements
        ]
        points.append(TheoryPoint("q = p", v_op, g_op, w_op, self.operating_thresholds[0], True, True))
        points += [
            TheoryPoint(f"TV {d:g}", v_op, g_op, w_op, self.operating_thresholds[0], True, True) for d in self.distances
        ]
        g0, w0, t0 = self.default
        grid = (
            [(g, w0, t0) for g in self.gammas]
            + [(g0, w, t0) for w in self.beam_widths]
            + [(g0, w0, t) for t in self.thresholds]
        )
        points += [TheoryPoint("q ≠ p", self.grid_vocab, g, w, t, True, False) for g, w, t in dict.fromkeys(grid)]
        return points


@dataclass
class ExactnessSettings:
    """C6: each case's first ``tokens`` tokens over ``runs`` seeded runs; 3 tokens at γ = 2 include
    the bonus token a fully accepted draft earns, as the exactness tests check."""

    runs: int = 2000
    alpha: float = 0.01
    power: float = 0.8  # the power at which each test's smallest detectable distance is stated
    vocab: int = 4
    tokens: int = 3
    processing: dict = field(default_factory=lambda: {"temperature": 1.0, "top_k": 3, "top_p": 0.9})
    # (method, settings): every lossless method at its registered exactness settings
    cases: tuple = field(default_factory=lambda: tuple(exactness_cases()))


def tiny_pair(vocab: int):
    from mtad.models.tiny import tiny_model

    return tiny_model("llama", vocab, seed=0), tiny_model("llama", vocab, seed=1)


@torch.inference_mode()
def per_token_tv(target, draft, gamma: int) -> float:
    """The mean over the γ positions of a block of E_p[TV(p(·|prefix), q(·|prefix))]: how far the
    draft's raw next-token law is from the target's along the target's own continuations."""
    blocks, logp = joint_block_logprobs(target, PROMPT[0], gamma)  # [N, γ], [N]
    inputs = torch.cat([PROMPT.expand(blocks.shape[0], -1), blocks], dim=1)  # [N, L+γ]
    start = PROMPT.shape[1] - 1
    p = target(input_ids=inputs).logits[:, start:-1].double().softmax(-1)  # [N, γ, V]
    q = draft(input_ids=inputs).logits[:, start:-1].double().softmax(-1)  # [N, γ, V]
    tv_at = 0.5 * (p - q).abs().sum(-1)  # [N, γ]: at each position, given the block's prefix
    # weighting every block by p(block) weighs each prefix of length t by p(prefix): the later
    # tokens of a block sum out
    return float((logp.double().exp()[:, None] * tv_at).sum(0).mean())


def mixed_model(target, other, weight: float):
    """A model of the target's architecture whose every weight is (1 − weight)·target's + weight·other's."""
    import copy

    mixed = copy.deepcopy(target)
    with torch.no_grad():
        for (_, mine), theirs in zip(mixed.named_parameters(), other.parameters()):
            mine.mul_(1 - weight).add_(theirs, alpha=weight)
    return mixed


def draft_at_distance(target, other, distance: float, gamma: int, steps: int = 20) -> tuple[object, float, float]:
    """(draft, weight, measured distance): the target's weights moved toward ``other``'s until the
    per-token TV (``per_token_tv``) is ``distance``, by bisection on the mixing weight (the distance
    is continuous in it, 0 at the target and ``per_token_tv(target, other)`` at the other model)."""
    farthest = per_token_tv(target, other, gamma)
    if distance >= farthest:
        raise ValueError(f"TV {distance} is beyond the other model's {farthest:.3f}: no mixture reaches it")
    low, high = 0.0, 1.0
    for _ in range(steps):
        middle = (low + high) / 2
        if per_token_tv(target, mixed_model(target, other, middle), gamma) < distance:
            low = middle
        else:
            high = middle
    draft = mixed_model(target, other, high)
    return draft, high, per_token_tv(target, draft, gamma)


def _interval(statistic, arrays, confidence, resamples) -> dict:
    return iv.bootstrap_interval(
        statistic, arrays, method="percentile", resamples=resamples, confidence=confidence
    ).as_dict()


def approximation_row(
    point: TheoryPoint, settings: TheorySettings, confidence: float = iv.CONFIDENCE, resamples: int = 2000
) -> dict:
    """Joint log-likelihoods and distances to exact MTJD at one point (keys in the module doc)."""
    target, other = tiny_pair(point.vocab)
    draft, distance = _point_draft(point, target, other)
    processing = {"temperature": 1.0, "top_k": settings.top_k, "top_p": settings.top_p}
    _, logp = joint_block_logprobs(target, PROMPT[0], point.gamma)  # [N] raw joint log p of every block
    logp = logp.double()
    mtjd = logits_to_probs(logp, **processing).double()  # [N] exact MTJD: truncation over whole blocks
    sampling = sequence_probs(target, PROMPT, point.gamma, processing)  # [N] token-by-token sampling
    logp_np, mtjd_np = logp.numpy(), mtjd.numpy()
    sampling_logp = float((sampling * logp).sum())
    # as many exact draws of sampling's blocks as the decoders ran: both plug-in distances then
    # carry the same finite-sample bias, and their difference does not
    rng = np.random.default_rng(0)
    sampling_draws = rng.choice(len(sampling), size=settings.runs, p=(sampling / sampling.sum()).numpy())
    row = {
        "point": point.__dict__,
        "label": point.label(),
        "runs": settings.runs,
        "draft_distance": distance,
        "exact": {
            "mtjd_logp": float((mtjd * logp).sum()),
            "sampling_logp": sampling_logp,
            "tv_sampling_mtjd": tv(sampling, mtjd),
            "noise_floor": noise_floor(mtjd_np, settings.runs),
        },
        "methods": {},
    }
    params = {
        "gamma": point.gamma,
        "beam_width": point.beam_width,
        "threshold": point.threshold,
        "replacement": point.replacement,
        **processing,
    }
    exact = Enumerated(logp_np, mtjd_np, sampling_logp, sampling_draws)
    for method in APPROXIMATORS:
        draws = draws_from_counts(empirical_counts(method, target, draft, params, PROMPT, point.gamma, settings.runs))
        row["methods"][method] = method_entry(draws, exact, confidence, resamples)
    return row


def _point_draft(point: TheoryPoint, target, other) -> tuple[object, dict]:
    """The point's draft (the target itself for q = p, ``other`` for q ≠ p, or a mixture of the two
    at the point's per-token TV) and its distance from the target: the mixing weight toward
    ``other`` and the measured per-token TV (``per_token_tv``)."""
    if point.draft.startswith("TV "):
        draft, weight, draft_tv = draft_at_distance(target, other, float(point.draft[3:]), point.gamma)
    else:
        draft, weight = (target, 0.0) if point.draft == "q = p" else (other, 1.0)
        draft_tv = per_token_tv(target, draft, point.gamma)
    return draft, {"mixing_weight": weight, "per_token_tv": draft_tv}


@dataclass(frozen=True)
class Enumerated:
    """What one point's enumeration gives every method's entry: the raw joint log p of every block
    ([N]), exact MTJD's law over them ([N]), sampling's exact E[log p], and as many exact draws of
    sampling's blocks as the decoders ran ([runs] block indices)."""

    logp: np.ndarray
    mtjd: np.ndarray
    sampling_logp: float
    sampling_draws: np.ndarray


def method_entry(draws: np.ndarray, exact: Enumerated, confidence: float, resamples: int) -> dict:
    """One method's entry at a point from its ``draws`` ([runs] block indices): E[log p] and its gain
    over sampling's with the verdict on the gain, its TV to exact MTJD, and that TV over sampling's,
    each with a percentile bootstrap interval."""
    logp_draws = exact.logp[draws]
    gain = iv.bootstrap_interval(
        lambda x, axis=-1: np.mean(x, axis=axis) - exact.sampling_logp,
        [logp_draws],
        method="percentile",
        resamples=resamples,
        confidence=confidence,
    )
    return {
        "logp": _interval(iv.mean, [logp_draws], confidence, resamples),
        "logp_gain": gain.as_dict(),
        "verdict": iv.verdict(gain, 0.0, +1),
        "tv_mtjd": _interval(lambda d, axis=-1: tv_of_draws(d, exact.mtjd, axis), [draws], confidence, resamples),
        "tv_gain": _interval(
            lambda a, b, axis=-1: tv_of_draws(a, exact.mtjd, axis) - tv_of_draws(b, exact.mtjd, axis),
            [draws, exact.sampling_draws],
            confidence,
            resamples,
        ),
    }


def approximation_rows(
    settings: TheorySettings, confidence: float = iv.CONFIDENCE, resamples: int = 2000
) -> list[dict]:
    """One C5 row per point of ``settings.points()``."""
    return [approximation_row(p, settings, confidence, resamples) for p in settings.points()]


def zero_distance_check(settings: TheorySettings, alpha: float, power: float) -> dict:
    """q = p, W = 1, no truncation, τ → 0: MTAD's first γ tokens are drawn from the joint p,
    which is exact MTJD without truncation; a chi-square test must not reject."""
    target, _ = tiny_pair(settings.vocab)
    gamma = settings.default[0]
    params = {"gamma": gamma, "beam_width": 1, "threshold": 0.01, **NO_TRUNCATION}
    counts = empirical_counts(MTAD, target, target, params, PROMPT, gamma, settings.runs)
    _, mtjd = exact_block_distribution(target, PROMPT[0], gamma, **NO_TRUNCATION)
    test = chisquare_exactness(counts, mtjd.double())
    return {
        "detectable_tv": detectable_tv(test.runs, test.cells, alpha, power),
        "power": power,
        "gamma": gamma,
        "beam_width": 1,
        "threshold": 0.01,
        "draft": "q = p",
        "processing": "none",
        **test.as_dict(),
        "alpha": alpha,
        "verdict": iv.REPRODUCED if test.pvalue > alpha else iv.CONTRADICTED,
    }


def exactness_rows(settings: ExactnessSettings) -> list[dict]:
    """C6: one chi-square test per lossless method configuration."""
    target, draft = tiny_pair(settings.vocab)
    probs = sequence_probs(target, PROMPT, settings.tokens, settings.processing)
    rows = []
    for method, params in settings.cases:
        counts = empirical_counts(
            method, target, draft, {**params, **settings.processing}, PROMPT, settings.tokens, settings.runs
        )
        test = chisquare_exactness(counts, probs)
        rows.append(
            {
                "detectable_tv": detectable_tv(test.runs, test.cells, settings.alpha, settings.power),
                "power": settings.power,
                "method": method,
                "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                "processing": dict(settings.processing),
                "tokens": settings.tokens,
                **test.as_dict(),
                "alpha": settings.alpha,
                "verdict": iv.REPRODUCED if test.pvalue > settings.alpha else iv.CONTRADICTED,
            }
        )
    return rows


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def run_theory(theory: TheorySettings, exactness: ExactnessSettings, confidence: float = iv.CONFIDENCE) -> dict:
    """C5's rows at every point, the zero-distance check and C6's tests, with their settings."""
    return {
        "approximation": approximation_rows(theory, confidence),
        "zero_distance_check": zero_distance_check(theory, exactness.alpha, exactness.power),
        "exactness": exactness_rows(exactness),
        "theory_settings": _jsonable(asdict(theory)),
        "exactness_settings": _jsonable(asdict(exactness)),
        "confidence": confidence,
    }


def stored_theory(path: Path, theory: TheorySettings, exactness: ExactnessSettings, confidence: float) -> dict | None:
    """The result stored at ``path`` when it was computed with these settings, else None."""
    from mtad.records import read_json

    stored = read_json(path)
    same = (
        stored.get("theory_settings") == _jsonable(asdict(theory))
        and stored.get("exactness_settings") == _jsonable(asdict(exactness))
        and stored.get("confidence") == confidence
    )
    return stored if same else None


def write_theory(path: Path, result: dict) -> None:
    """``result`` with the environment that computed it (machine, versions, code state)."""
    from mtad.provenance import environment_record
    from mtad.records import write_json

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {**result, "environment": environment_record()})
