"""Per-cell aggregation of the decoders' per-sample statistics (mtad/metrics/README.md, "Speed").

Ratios are taken of sums over every generation of the cell (ratio of totals, as Spec-Bench
does), so long and short outputs weigh by their tokens rather than one vote each:

- tokens_per_s       = Σ new tokens / Σ decoding seconds
- block_efficiency   = Σ new tokens / Σ target calls   (bonus token included)
- acceptance_rate    = Σ accepted / Σ drafted          (None when nothing was drafted)
- mean_accept_length = mean of every iteration's accepted length (None without drafts)
- energy_j_per_token = Σ joules / Σ new tokens         (None if any window lacks a reading)
"""

from __future__ import annotations

from typing import Iterable, Mapping

from mtad.decode_stats import COUNTS, SUMMED


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def aggregate_speed(stats: Iterable[Mapping]) -> dict:
    """Cell totals and ratios from per-generation ``DecodeStats.as_dict()`` records."""
    stats = list(stats)
    totals = {key: sum(s.get(key, 0) for s in stats) for key in SUMMED}
    accept_lengths = [length for s in stats for length in s.get("accept_lengths", [])]
    n = len(stats)
    return {
        "generations": n,
        "new_tokens": totals["new_tokens"],
        "decode_seconds": totals["seconds"],
        "target_seconds": totals["target_seconds"],  # inside target forwards
        "draft_seconds": totals["draft_seconds"],  # inside draft forwards; the rest is sampling, rules, Python
        "tokens_per_s": _ratio(totals["new_tokens"], totals["seconds"]),
        "block_efficiency": _ratio(totals["new_tokens"], totals["target_calls"]),
        "acceptance_rate": _ratio(totals["accepted"], totals["drafted"]),
        "mean_accept_length": _ratio(sum(accept_lengths), len(accept_lengths)),
        **{key: totals[key] for key in COUNTS if key != "new_tokens"},
        "target_calls_per_generation": _ratio(totals["target_calls"], n),
        "draft_calls_per_generation": _ratio(totals["draft_calls"], n),
        "new_tokens_per_generation": _ratio(totals["new_tokens"], n),
    }


def aggregate_energy(readings: Iterable[Mapping], new_tokens: int) -> dict:
    """Joules per token over the decoding windows; missing (with the reasons) if any window is."""
    readings = list(readings)
    missing = [r for r in readings if r.get("joules") is None]
    if not readings or missing:
        reasons = sorted({r.get("reason") or "no reading" for r in missing}) or ["no decoding window"]
        return {
            "energy_meter": readings[0].get("meter") if readings else None,
            "energy_j": None,
            "energy_j_per_token": None,
            "energy_missing_reason": "; ".join(reasons),
        }
    joules = sum(r["joules"] for r in readings)
    return {
        "energy_meter": readings[0].get("meter"),
        "energy_j": joules,
        "energy_j_per_token": _ratio(joules, new_tokens),
        "energy_missing_reason": None,
    }
