"""A cell's metrics from its records: task scores, perplexity, speed, acceptance and energy."""

from __future__ import annotations

import math


def unrated(task, record: dict) -> list[str]:
    """Why samples of ``record`` still lack a score the task could give (e.g. the judge failed)."""
    return [reason for s in record["samples"] if (reason := task.unfinished(s["scores"]))]


def cell_metrics(task, records: list[dict], limit_ids: list[str]) -> dict:
    from mtad.metrics.perplexity import perplexity
    from mtad.metrics.speed import aggregate_energy, aggregate_speed

    by_id = {r["id"]: r for r in records}
    done = [by_id[i] for i in limit_ids if i in by_id]
    turns = [t for r in done for s in r["samples"] for t in s["turns"]]
    speed = aggregate_speed(t["stats"] for t in turns)
    mean_logprobs = [s["mean_logprob"] for r in done for s in r["samples"] if s["mean_logprob"] is not None]
    sample_scores = [(r["id"], s["scores"]) for r in done for s in r["samples"]]  # ids repeat for n > 1
    scores = task.aggregate([sc for _, sc in sample_scores], [i for i, _ in sample_scores]) if done else {}
    unscored = {r["id"]: reasons for r in done if (reasons := unrated(task, r))}
    status = "complete" if len(done) == len(limit_ids) and not unscored else "incomplete"
    reasons = []
    if len(done) < len(limit_ids):
        reasons.append(f"{len(limit_ids) - len(done)} of {len(limit_ids)} examples not generated")
    if unscored:
        first_id, first = next(iter(unscored.items()))
        reasons.append(
            f"{len(unscored)} example(s) not scored, the next run scores them again (example {first_id}: {first[0]})"
        )
    return {
        "status": status,
        "incomplete_reason": "; ".join(reasons) or None,
        "examples": len(done),
        "examples_planned": len(limit_ids),
        "examples_unscored": len(unscored),
        "samples": sum(len(r["samples"]) for r in done),
        "scores": scores,
        "perplexity": float(perplexity(mean_logprobs)) if mean_logprobs else None,
        "mean_logprob": sum(mean_logprobs) / len(mean_logprobs) if mean_logprobs else None,
        **speed,
        **aggregate_energy([t["energy"] for t in turns], speed["new_tokens"]),
    }


def summary(metrics: dict) -> str:
    keys = ("perplexity", "tokens_per_s", "block_efficiency", "acceptance_rate", "energy_j_per_token")
    parts = [f"{k}={metrics[k]:.3f}" for k in keys if isinstance(metrics.get(k), float) and math.isfinite(metrics[k])]
    return ", ".join(parts + [f"{k}={v:.3f}" for k, v in metrics["scores"].items() if isinstance(v, float)])
