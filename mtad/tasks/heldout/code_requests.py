"""Requests about code and SQL. About a real function of the standard library or an installed
package (`docstrings.code_functions`): the HumanEval task's wording, a docstring to write, a bug put
in to find, the function to write from its docstring, or a task on its code (explain, test, type,
refactor, translate). Text-to-SQL over the made-up schemas (`sources.SCHEMAS`), each written in one of
several formats. The wordings, bugs and SQL questions are data (`code.json`, `sql.json`)."""

from __future__ import annotations

import ast
import random
import re
from functools import cache

from ..prompts import SQL_QUESTIONS
from .docstrings import Function, code_functions, function_doc
from .prose import fit, frame
from .request_data import at
from .sources import MORE_SQL_QUESTIONS, SCHEMAS, code_request, schema_text, sql_request
from .subjects import pick, sql_tables


def code_block(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def _without_docstring(source: str) -> str | None:
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node):
        return None
    lines = source.splitlines()
    doc = node.body[0]
    return "\n".join(lines[: doc.lineno - 1] + lines[doc.end_lineno :])


def _with_bug(rng: random.Random, source: str) -> str | None:
    """The function with one comparison or offset changed after its docstring, or None if it has none to change."""
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    body_line = node.body[0].end_lineno if ast.get_docstring(node) else node.lineno
    body_at = sum(len(line) + 1 for line in source.splitlines()[:body_line])
    places = [(i, old, new) for old, new in at("code.bugs") for i in _find_all(source, old) if i >= body_at]
    if not places:
        return None
    i, old, new = rng.choice(places)
    return source[:i] + new + source[i + len(old) :]


def _find_all(text: str, part: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(part), text)]


def _task_wording(rng: random.Random, fn: Function) -> str:
    return code_request(fn.prompt)  # the HumanEval task's wording, over a real function


def _docstring_request(rng: random.Random, fn: Function) -> str | None:
    bare = _without_docstring(fn.source)
    if not bare:
        return None
    style = rng.choice(at("code.docstring_styles"))
    return at("code.docstring_request").format(style=style, code=code_block(bare))


def _bug_request(rng: random.Random, fn: Function) -> str | None:
    buggy = _with_bug(rng, fn.source)
    return at("code.bug_request").format(code=code_block(buggy)) if buggy else None


def _function_request(rng: random.Random, fn: Function) -> str:
    name, doc = fn.name.rsplit(".", 1)[-1], function_doc(fn)
    goal = fit(doc, 60, 400) or doc[:400]
    if goal:
        return at("code.function_request").format(name=name, goal=goal)
    return at("code.bare_function_request").format(name=name)


def _task_on_code(rng: random.Random, fn: Function) -> str:
    task = rng.choice(at("code.tasks")).format(lang=rng.choice(at("code.other_languages")))
    return frame(rng, task, code_block(fn.source), "Code", block=True)


# (cumulative share of the draws, form): a form that cannot apply to the function (no docstring to
# remove, nothing to break) passes its draw on to the next; the rest are tasks on the code
CODE_FORMS = ((0.15, _task_wording), (0.27, _docstring_request), (0.39, _bug_request), (0.47, _function_request))


def code_text(rng: random.Random, held: bool) -> tuple[str, str]:
    """A request about a real function, and the function's key."""
    fn = pick(rng, code_functions, held)
    choice = rng.random()
    for limit, form in CODE_FORMS:
        if choice < limit and (text := form(rng, fn)):
            return text, fn.key
    return _task_on_code(rng, fn), fn.key


# ----------------------------------------------------------------------------- SQL


@cache
def _columns(kind: str) -> frozenset[str]:
    """The schemas' numeric_columns or real_columns (`sql.json`)."""
    return frozenset(at(f"sql.{kind}"))


def _column_type(col: str) -> str:
    numeric, real = _columns("numeric_columns"), _columns("real_columns")
    if col == "id" or col.endswith("_id") or (col in numeric and col not in real):
        return "INTEGER"
    return "REAL" if col in real else "TEXT"


def _schema(rng: random.Random, tables: list[tuple[str, list[str]]]) -> str:
    """The tables in one of several formats: CREATE TABLE (`sources.schema_text`), compact, typed list, markdown."""
    style = rng.randrange(4)
    if style == 0:
        return schema_text(*tables[0], tables[1] if len(tables) > 1 else None)
    if style == 1:
        return "\n".join(f"{t}({', '.join(cols)})" for t, cols in tables)
    if style == 2:
        return "\n\n".join(f"Table {t}:\n" + "\n".join(f"- {c} {_column_type(c)}" for c in cols) for t, cols in tables)
    return "\n\n".join(
        f"Table `{t}`\n\n| column | type |\n|---|---|\n" + "\n".join(f"| {c} | {_column_type(c)} |" for c in cols)
        for t, cols in tables
    )


def sql_text(rng: random.Random, held: bool) -> tuple[str, str]:
    """A text-to-SQL request over one or two of the made-up tables, and the first table's name."""
    name = pick(rng, sql_tables, held).name
    cols, numeric = dict(SCHEMAS)[name], _columns("numeric_columns")
    # a text column to group or list by, a numeric one to compare, sum or sort by (every table has both)
    c1 = rng.choice([c for c in cols[1:] if c not in numeric and not c.endswith("_id")] or cols[1:])
    c2 = rng.choice([c for c in cols if c in numeric] or cols[1:])
    slots = dict(table=name, c1=c1, c2=c2, num=c2, k=rng.randint(2, 10))
    slots.update(a=rng.randint(1, 60), b=rng.randint(61, 5000))
    question = rng.choice(SQL_QUESTIONS + MORE_SQL_QUESTIONS + list(at("sql.number_questions"))).format(**slots)
    tables = [(name, cols)]
    if rng.random() < 0.4:
        other = pick(rng, sql_tables, held).name
        tables += [(other, dict(SCHEMAS)[other])] if other != name else []
    schema = _schema(rng, tables)
    if rng.random() < 0.3:
        return sql_request(schema, question), name  # the Spider task's wording
    return rng.choice(at("sql.frames")).format(schema=schema, q=question), name
