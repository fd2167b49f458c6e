"""One row per (cell, example) from the cells' ``samples.jsonl``: what intervals resample.

    from mtad.report.cells import load_cells
    from mtad.report.examples import example_frame
    rows = example_frame(load_cells("results/runs", experiment="claims"))

Columns: the cell's identity (experiment, pair, task, method, overrides, path), ``id``, and per
example (summed or averaged over its samples and turns):

mean_logprob   mean over samples of each sample's mean target log-prob per token (raw p)
score          mean over samples of the task's headline score of one sample (``score_name``)
seconds and every count of the decoders' records (``decode_stats.COUNTS``: new_tokens, target_calls,
               draft_calls, drafted, accepted, tree_nodes, draft_rows, prompt_tokens)   summed over
               samples and turns
generations    its generations (one per sample and turn)
energy_j       summed joules, None when any window had no reading
samples        samples of the example

Nothing is filled in: a missing value stays None/NaN. The file is only read
(``mtad.records.read_records``: a torn or corrupt line is skipped, not cut off).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mtad.decode_stats import COUNTS
from mtad.records import read_records
from mtad.report.values import is_missing

IDENTITY = ["experiment", "pair", "task", "method", "overrides", "path"]
EXAMPLE_COLUMNS = [
    "id",
    "samples",
    "mean_logprob",
    "score",
    "new_tokens",
    "seconds",
    *(key for key in COUNTS if key != "new_tokens"),
    "generations",
    "energy_j",
]
# The headline score of a cell that is not a per-sample field: pass@1 over problems is the mean
# over problems of the fraction of a problem's samples that pass (the unbiased estimator at k = 1).
PER_SAMPLE_SCORE = {"pass@1": "passed"}


def sample_score(scores: dict, score_name: str | None) -> float | None:
    if score_name is None:
        return None
    value = scores.get(PER_SAMPLE_SCORE.get(score_name, score_name))
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def example_row(record: dict, score_name: str | None) -> dict:
    samples = record["samples"]
    turns = [t for s in samples for t in s["turns"]]
    joules = [(t.get("energy") or {}).get("joules") for t in turns]

    def total(key):
        return sum(t["stats"][key] for t in turns)

    return {
        "id": str(record["id"]),
        "samples": len(samples),
        "mean_logprob": _mean(s.get("mean_logprob") for s in samples),
        "score": _mean(sample_score(s.get("scores") or {}, score_name) for s in samples),
        "new_tokens": total("new_tokens"),
        "seconds": total("seconds"),
        **{key: total(key) for key in COUNTS if key != "new_tokens"},
        "generations": len(turns),
        "energy_j": None if not joules or any(j is None for j in joules) else float(sum(joules)),
    }


def cell_examples(path: str | Path, score_name: str | None = None) -> pd.DataFrame:
    """One row per finished example of the cell at ``path`` (columns in the module doc)."""
    rows = [example_row(r, score_name) for r in read_records(Path(path) / "samples.jsonl")]
    return pd.DataFrame(rows, columns=EXAMPLE_COLUMNS)


def example_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """Per-example rows of every cell in ``cells`` (a ``load_cells`` frame), identity columns first."""
    frames = []
    for cell in cells.itertuples(index=False):
        score_name = getattr(cell, "score_name", None)
        score_name = score_name if isinstance(score_name, str) else None
        rows = cell_examples(cell.path, score_name)
        for column in reversed(IDENTITY):
            value = getattr(cell, column, None)
            rows.insert(0, column, "" if column == "overrides" and is_missing(value) else value)
        frames.append(rows)
    if not frames:
        return pd.DataFrame(columns=IDENTITY + ["id"])
    return pd.concat(frames, ignore_index=True)


def paired(frame: pd.DataFrame, methods: list[str], columns: list[str]) -> pd.DataFrame:
    """Examples that every one of ``methods`` finished, one row per example id (sorted), with
    ``<method>.<column>`` for each column: the arrays a paired bootstrap takes, aligned by prompt."""
    wide = None
    for method in methods:
        part = frame[frame["method"] == method].drop_duplicates("id").set_index("id")[columns]
        part = part.add_prefix(f"{method}.")
        wide = part if wide is None else wide.join(part, how="inner")
    return wide.sort_index() if wide is not None else pd.DataFrame()
