"""``samples.jsonl``: the record schema, its one reader and its writers, and the per-sample seeds
that make a resumed cell generate what an uninterrupted one would.

A line is one finished example (``Record``): its samples (``SampleRecord``: n per example), each
with its turns (``TurnRecord``: one generation each, MT-Bench has two) and their decoder
statistics (``mtad.decoding.DecodeStats.as_dict()``). ``read_records`` is the one reading of a
file, for the runner (``repair=True``: a torn last line is cut off, a rejected line moved to
``samples.jsonl.corrupt``) and for every report (read-only: a rejected line is skipped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, get_type_hints

log = logging.getLogger("mtad.run")


class _Turn(TypedDict):
    text: str  # the decoded new tokens
    completion: str  # what the task scores (task.postprocess of the text)
    token_ids: list  # the new tokens
    stats: dict  # DecodeStats.as_dict(): new_tokens, seconds, target_calls, acceptance, ...
    logprob_sum: float  # target log-probability of the new tokens (raw p), summed
    logprob_n: int  # how many tokens it sums


class TurnRecord(_Turn, total=False):
    """One generation: a turn of one sample (the fields above this class are required)."""

    turn: int
    prompt_tokens: int
    energy: dict  # EnergyReading.as_dict() over the generation's window
    profile: dict  # where its blocks' time went by phase (`Profile.block_record`), when the run's `profile` is on


class _Sample(TypedDict):
    turns: list  # [TurnRecord]
    scores: dict  # the task's scores of this sample


class SampleRecord(_Sample, total=False):
    """One sample of an example (n > 1 for pass@k), every turn of it."""

    sample: int
    seed: int  # derive_seed(run seed, example id, sample index)
    mean_logprob: float | None  # over the sample's tokens; None when it has none


class _Record(TypedDict):
    id: str
    samples: list  # [SampleRecord]


class Record(_Record, total=False):
    """One line of samples.jsonl: a finished example."""

    new_tokens: int
    decode_seconds: float
    run: int  # index into env.json's `runs`: the conditions (threads, dtype, machine, code) it ran under


# What every reader relies on in a turn's statistics (the rest of DecodeStats is optional).
STATS_FIELDS = {"new_tokens": int, "seconds": (int, float), "target_calls": int}


def derive_seed(seed: int, example_id: str, sample_index: int) -> int:
    """A 63-bit seed from (run seed, example id, sample index): stable across resumes and runs."""
    digest = hashlib.sha256(f"{seed}\x1f{example_id}\x1f{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _required(schema: type) -> dict[str, Any]:
    """The required fields of a TypedDict and their types (``float`` also takes an int)."""
    hints = get_type_hints(schema)
    kinds = {name: hints[name] for name in hints if name in schema.__required_keys__}
    return {name: (int, float) if kind is float else kind for name, kind in kinds.items()}


RECORD_FIELDS, SAMPLE_FIELDS, TURN_FIELDS = _required(Record), _required(SampleRecord), _required(TurnRecord)


def _missing_or_mistyped(obj, fields: dict, where: str) -> str | None:
    """Why `obj` (named `where`) is not an object holding `fields` with their types, or None."""
    if not isinstance(obj, dict):
        return f"{where} is not an object"
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
        problem = _missing_or_mistyped(sample, SAMPLE_FIELDS, where)
        if problem or not sample["turns"]:
            return problem or f"{where} has no turns"
        for t, turn in enumerate(sample["turns"]):
            where = f"sample {i} turn {t}"
            problem = _missing_or_mistyped(turn, TURN_FIELDS, where) or _missing_or_mistyped(
                turn["stats"], STATS_FIELDS, f"{where} stats"
            )
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


def read_records(samples_path: Path, repair: bool = False) -> list[Record]:
    """The finished examples in samples.jsonl ([] when there is none yet).

    A rejected line (torn, corrupt, failing the schema, a duplicate; ``parse_records``) is skipped
    with a warning naming the file and line. ``repair`` (the run that appends to the file): a torn
    last line is cut off, every other rejected line is moved to ``samples.jsonl.corrupt`` and the
    file keeps every valid line, also those after it (a rejected example runs again).
    """
    samples_path = Path(samples_path)
    try:
        raw = samples_path.read_bytes()
    except FileNotFoundError:
        return []
    records, kept, rejected = parse_records(raw)
    if not repair:
        for r in rejected:
            log.warning("%s line %d skipped: %s", samples_path, r.number, r.why)
        return records
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


# lines that record when a report was built, not what it says
BUILD_TIME_LINE = re.compile(r'^\s*(- built[ :]|"built": )')


def same_content(old: str, new: str) -> bool:
    """Two renderings of a report that differ at most in their build-time lines."""

    def content(text: str) -> list[str]:
        return [line for line in text.splitlines() if not BUILD_TIME_LINE.match(line)]

    return content(old) == content(new)


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` to `path` unless the file already says the same (`same_content`): a rebuild whose
    content is unchanged leaves a committed report, and the checkout, untouched. True if written."""
    path = Path(path)
    if path.is_file() and same_content(path.read_text(), text):
        return False
    path.write_text(text)
    return True


def read_json(path: Path) -> dict:
    """A JSON file's object, or {} when it is absent or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


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
