"""``samples.jsonl``: one JSON line per finished example, appended and fsynced, and the
per-sample seeds that make a resumed cell generate what an uninterrupted one would."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mtad.run")


def derive_seed(seed: int, example_id: str, sample_index: int) -> int:
    """A 63-bit seed from (run seed, example id, sample index): stable across resumes and runs."""
    digest = hashlib.sha256(f"{seed}\x1f{example_id}\x1f{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


# The record schema: what every reader of samples.jsonl relies on (field -> type).
RECORD_FIELDS = {"id": str, "samples": list}
SAMPLE_FIELDS = {"turns": list, "scores": dict}
TURN_FIELDS = {
    "token_ids": list,
    "text": str,
    "completion": str,
    "stats": dict,
    "logprob_sum": (int, float),
    "logprob_n": int,
}
STATS_FIELDS = {"new_tokens": int, "seconds": (int, float), "target_calls": int}


def _missing_or_mistyped(obj: dict, fields: dict, where: str) -> str | None:
    for name, kind in fields.items():
        if name not in obj:
            return f"{where} lacks {name!r}"
        if not isinstance(obj[name], kind) or isinstance(obj[name], bool):
            return f"{where}: {name!r} is {type(obj[name]).__name__}, not {getattr(kind, '__name__', kind)}"
    return None


def record_problem(record) -> str | None:
    """Why ``record`` is not a valid samples.jsonl record, or None when it is."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a record"
    problem = _missing_or_mistyped(record, RECORD_FIELDS, "the record")
    if problem or not record["samples"]:
        return problem or "the record has no samples"
    for i, sample in enumerate(record["samples"]):
        where = f"sample {i}"
        problem = (
            _missing_or_mistyped(sample, SAMPLE_FIELDS, where)
            if isinstance(sample, dict)
            else f"{where} is not an object"
        )
        if problem or not sample["turns"]:
            return problem or f"{where} has no turns"
        for t, turn in enumerate(sample["turns"]):
            where = f"sample {i} turn {t}"
            problem = (
                _missing_or_mistyped(turn, TURN_FIELDS, where)
                if isinstance(turn, dict)
                else f"{where} is not an object"
            ) or _missing_or_mistyped(turn["stats"], STATS_FIELDS, f"{where} stats")
            if problem:
                return problem
    return None


@dataclass(frozen=True)
class Rejected:
    """A line of samples.jsonl that is not a finished example."""

    number: int
    line: bytes
    why: str
    kind: str  # "torn" (a killed write, the last line), "corrupt" (unparsable or off-schema), "duplicate"


def parse_records(raw: bytes) -> tuple[list[dict], list[bytes], list[Rejected]]:
    """The one reading of a samples.jsonl: (valid records, their lines, rejected lines). A torn last
    line (no newline: a killed write), a line that does not parse or fails the schema, and a line
    repeating an example already read are rejected, each with the reason."""
    records, kept, rejected, seen = [], [], [], set()
    for number, line in enumerate(raw.splitlines(keepends=True), start=1):
        if not line.endswith(b"\n"):  # only the last line can lack its newline
            rejected.append(Rejected(number, line, "torn (an interrupted write)", "torn"))
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            rejected.append(Rejected(number, line, f"not JSON ({exc})", "corrupt"))
            continue
        problem = record_problem(record)
        if problem:
            rejected.append(Rejected(number, line, problem, "corrupt"))
            continue
        if record["id"] in seen:
            rejected.append(
                Rejected(number, line, f"a second record of example {record['id']!r} (the first is kept)", "duplicate")
            )
            continue
        seen.add(record["id"])
        records.append(record)
        kept.append(line)
    return records, kept, rejected


def read_finished(samples_path: Path) -> list[dict]:
    """Records already in samples.jsonl, for the run that appends to it.

    A torn last line is cut off. Every other rejected line (corrupt, failing the schema, or a
    duplicate) is reported with the file and line number and moved to ``samples.jsonl.corrupt``;
    every valid line, also those after it, is kept (a rejected example runs again).
    """
    samples_path = Path(samples_path)
    if not samples_path.exists():
        return []
    records, kept, rejected = parse_records(samples_path.read_bytes())
    for r in rejected:
        if r.kind == "torn":
            log.warning("cutting a torn last line off %s (an interrupted write)", samples_path)
        else:
            log.error(
                "%s line %d is rejected: %s; it is moved to %s%s",
                samples_path,
                r.number,
                r.why,
                samples_path.name + ".corrupt",
                "" if r.kind == "duplicate" else " and its example runs again",
            )
    quarantined = [r.line for r in rejected if r.kind != "torn"]
    if quarantined:
        with open(samples_path.with_name(samples_path.name + ".corrupt"), "ab") as f:
            f.writelines(quarantined)
    if rejected:  # only whole, valid records stay, so a rerun appends after them
        _atomic_write_bytes(samples_path, b"".join(kept))
    return records


def append_record(samples_path: Path, record: dict) -> None:
    with open(samples_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def rewrite_records(samples_path: Path, records: list[dict]) -> None:
    """Replace samples.jsonl with ``records`` in one atomic step (after re-scoring some)."""
    _atomic_write_bytes(
        Path(samples_path), b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records)
    )


def write_json(path: Path, data: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def _atomic_write_bytes(path: Path, content: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
