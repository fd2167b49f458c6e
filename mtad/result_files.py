"""The result files outside the cells: three kinds, a file each, one reader and one writer for all.

The cells (``<results_root>/runs``: ``samples.jsonl``, ``metrics.json``, ``env.json``; read by
``mtad.records`` and ``mtad.runner.layout``) hold what a generation produced. What is measured
beside them goes into one file per kind and output folder, ``<folder>/<kind>.json`` (or under another
stem where a folder holds several of a kind, e.g. the claims of another pair, ``claims_<pair>.json``):

    {"kind": "bench", "sections": {"timings": {...}, "profile": {...}, ...}}

Each section is written by the step that measures it (``write_section``: atomically, the file's
other sections kept, so the steps of a kind may run in any order and resume) and read by
``read_section``. The package that writes a section owns its payload: other packages call that
package's functions for what they show, and never read its keys themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mtad.records import write_json


@dataclass(frozen=True)
class ResultKind:
    """A kind of result file: its name (the file is ``<folder>/<name>.json``) and its sections, each
    with the package that writes it and what it holds."""

    name: str
    sections: dict[str, str]

    def path(self, folder: Path, stem: str | None = None) -> Path:
        return Path(folder) / f"{stem or self.name}.json"

    def check(self, section: str) -> None:
        if section not in self.sections:
            raise ValueError(f"{self.name}.json has no section {section!r}; valid: {', '.join(self.sections)}")


BENCH = ResultKind(
    "bench",
    {
        "timings": "mtad.bench.render: every method's tokens/s, the cost curves, the calibration, llama.cpp",
        "profile": "mtad.bench.block_profile: where a block's time goes, fixed drafting",
        "profile_adaptive": "mtad.bench.block_profile: the same with adaptive drafting",
        "target_distance": "mtad.bench.target_distance: the reduced targets' distance from float32",
    },
)
DRAFT = ResultKind(
    "draft",
    {
        "measurement": "mtad.distill.draft_measurement: the draft on held-out requests of every kind",
        "calibration": "mtad.distill.head_reports: the head's confidence against the target's acceptance",
        "head_design": "mtad.distill.head_reports: the head's design A/Bs and accelerator rounds",
        "pipeline_rates": "mtad.distill.card_training: the distillation pipeline's rates on a quiet machine",
        "training_ab": "mtad.distill.card: each draft kind's training A/B, under its kind (a key of card.CARDS)",
    },
)
CLAIMS = ResultKind("claims", {"claims": "mtad.report.claims_report: every claim's rows, intervals and verdicts"})
KINDS = {kind.name: kind for kind in (BENCH, DRAFT, CLAIMS)}


class ResultFileError(ValueError):
    """A result file that is not one of `KINDS` as this code writes it: the message says which and why."""


def read_file(kind: ResultKind, folder: Path, stem: str | None = None) -> dict[str, dict]:
    """Every section in ``<folder>/<stem or kind>.json`` ({} when the file is absent)."""
    path = kind.path(folder, stem)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ResultFileError(f"{path}: not JSON ({err})") from err
    if not isinstance(data, dict) or data.get("kind") != kind.name or not isinstance(data.get("sections"), dict):
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise ResultFileError(f"{path}: not a {kind.name} result file (kind {found!r}, expected {kind.name!r})")
    unknown = sorted(set(data["sections"]) - set(kind.sections))
    if unknown:
        raise ResultFileError(f"{path}: unknown sections {unknown}; valid: {', '.join(kind.sections)}")
    return data["sections"]


def read_section(kind: ResultKind, folder: Path, section: str, stem: str | None = None) -> dict | None:
    """Section `section` of ``<folder>/<stem or kind>.json``, or None when the file or the section is absent."""
    kind.check(section)
    return read_file(kind, folder, stem).get(section)


def write_section(kind: ResultKind, folder: Path, section: str, payload: dict, stem: str | None = None) -> Path:
    """`payload` as section `section` of ``<folder>/<stem or kind>.json`` (atomically; other sections kept)."""
    kind.check(section)
    if not isinstance(payload, dict):
        raise TypeError(f"a {kind.name} section is an object, not {type(payload).__name__}")
    sections = {**read_file(kind, folder, stem), section: payload}
    ordered = {name: sections[name] for name in kind.sections if name in sections}  # a stable file
    path = kind.path(folder, stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"kind": kind.name, "sections": ordered})
    return path
