"""Compare a rerun of cells with a reference run: what must reproduce exactly does.

Exactly reproducible (same CPU type, same library versions, one torch thread): every
generated token, the target log-probabilities and so perplexity, the decoders' counts and
so block efficiency and acceptance, and the task scores. Not reproducible: wall-clock
figures (tokens/s, seconds, speed-ups), energy and peak memory; they are not compared.

    from mtad.report.reproduce import compare_runs
    differences = compare_runs("results/verify", "/tmp/rerun")   # [] when everything matches
"""
from __future__ import annotations

import json
from pathlib import Path

from mtad.report.cells import find_cells
from mtad.runner.layout import ENV, METRICS, SAMPLES, read_json

EXACT_METRICS = ("status", "examples", "samples", "generations", "new_tokens", "target_calls", "draft_calls",
                 "drafted", "accepted", "tree_nodes", "perplexity", "mean_logprob", "block_efficiency",
                 "acceptance_rate", "mean_accept_length", "scores")
EXACT_TURN_FIELDS = ("token_ids", "text", "completion", "logprob_sum", "logprob_n", "prompt_tokens")
EXACT_STATS = ("new_tokens", "target_calls", "draft_calls", "drafted", "accepted", "accept_lengths", "tree_nodes")
MACHINE_FIELDS = ("cpu", "gpus", "torch_threads", "dtype", "versions")


def _records(directory: Path) -> dict[str, dict]:
    path = directory / SAMPLES
    if not path.exists():
        return {}
    return {r["id"]: r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())}


def compare_cell(reference: Path, candidate: Path, name: str) -> list[str]:
    """Differences in what must reproduce exactly between two cells of the same identity."""
    if not (candidate / METRICS).exists():
        return [f"{name}: the rerun wrote no metrics.json"]
    out = []
    ref_metrics, new_metrics = read_json(reference / METRICS), read_json(candidate / METRICS)
    for key in EXACT_METRICS:
        if ref_metrics.get(key) != new_metrics.get(key):
            out.append(f"{name}: {key} {ref_metrics.get(key)!r} -> {new_metrics.get(key)!r}")
    ref_records, new_records = _records(reference), _records(candidate)
    if sorted(ref_records) != sorted(new_records):
        out.append(f"{name}: example ids {sorted(ref_records)} -> {sorted(new_records)}")
    for example_id in sorted(set(ref_records) & set(new_records)):
        pairs = zip(ref_records[example_id]["samples"], new_records[example_id]["samples"])
        for s, (ref_sample, new_sample) in enumerate(pairs):
            for t, (ref_turn, new_turn) in enumerate(zip(ref_sample["turns"], new_sample["turns"])):
                where = f"{name}: example {example_id} sample {s} turn {t}"
                for key in EXACT_TURN_FIELDS:
                    if ref_turn.get(key) != new_turn.get(key):
                        out.append(f"{where}: {key} differs ({_short(ref_turn.get(key))} -> {_short(new_turn.get(key))})")
                for key in EXACT_STATS:
                    if ref_turn["stats"].get(key) != new_turn["stats"].get(key):
                        out.append(f"{where}: stats.{key} {ref_turn['stats'].get(key)!r} -> {new_turn['stats'].get(key)!r}")
    return out


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def compare_runs(reference_root: str | Path, candidate_root: str | Path) -> list[str]:
    """Every difference between the reference cells and the rerun's cells of the same path."""
    reference_root, candidate_root = Path(reference_root), Path(candidate_root)
    cells = find_cells(reference_root)
    if not cells:
        return [f"no reference cells under {reference_root}"]
    out = []
    for reference in cells:
        relative = reference.relative_to(reference_root)
        out += compare_cell(reference, candidate_root / relative, str(relative))
    return out


def machine_differences(reference_root: str | Path, candidate_root: str | Path) -> list[str]:
    """Where the rerun's machine or libraries differ from the reference's (exact reproduction
    is only expected where they agree)."""
    out = set()
    for reference in find_cells(reference_root):
        ref_env = read_json(reference / ENV)
        new_env = read_json(Path(candidate_root) / reference.relative_to(reference_root) / ENV)
        for key in MACHINE_FIELDS:
            if new_env and ref_env.get(key) != new_env.get(key):
                out.add(f"{key}: reference {ref_env.get(key)!r}, here {new_env.get(key)!r}")
    return sorted(out)
