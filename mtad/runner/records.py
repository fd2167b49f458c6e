"""``samples.jsonl``: one JSON line per finished example, appended and fsynced, and the
per-sample seeds that make a resumed cell generate what an uninterrupted one would."""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

log = logging.getLogger("mtad.run")


def derive_seed(seed: int, example_id: str, sample_index: int) -> int:
    """A 63-bit seed from (run seed, example id, sample index): stable across resumes and runs."""
    digest = hashlib.sha256(f"{seed}\x1f{example_id}\x1f{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def read_finished(samples_path: Path) -> list[dict]:
    """Records already in samples.jsonl.

    A torn last line (no newline: the process was killed mid-write) is cut off. A line that
    ends with a newline but is not a JSON record is corruption, not an interrupted write: it
    is reported with its line number, moved to ``samples.jsonl.corrupt``, and every valid
    line, also those after it, is kept (its example runs again).
    """
    samples_path = Path(samples_path)
    if not samples_path.exists():
        return []
    raw = samples_path.read_bytes()
    records, kept, corrupt = [], [], []
    lines = raw.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if not line.endswith(b"\n"):  # only the last line can lack its newline
            log.warning("cutting a torn last line off %s (an interrupted write)", samples_path)
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "id" not in record:
                raise ValueError("not a record with an id")
        except ValueError as exc:
            log.error("%s line %d is corrupted (%s); it is moved to %s and its example runs again; "
                      "the %d line(s) after it are kept", samples_path, number, exc,
                      samples_path.name + ".corrupt", len(lines) - number)
            corrupt.append(line)
            continue
        records.append(record)
        kept.append(line)
    if corrupt:
        with open(samples_path.with_name(samples_path.name + ".corrupt"), "ab") as f:
            f.writelines(corrupt)
    if len(kept) != len(lines):  # only whole records stay, so a rerun appends after them
        _atomic_write_bytes(samples_path, b"".join(kept))
    return records


def append_record(samples_path: Path, record: dict) -> None:
    with open(samples_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def rewrite_records(samples_path: Path, records: list[dict]) -> None:
    """Replace samples.jsonl with ``records`` in one atomic step (after re-scoring some)."""
    _atomic_write_bytes(Path(samples_path),
                        b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records))


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
