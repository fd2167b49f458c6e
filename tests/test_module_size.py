"""No module of the package holds more than 600 lines of logic: code, not its docstrings, comments
or blank lines (data tables live in mtad/assets/)."""

import ast
import io
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mtad"
MAX_LOGIC_LINES = 600


def logic_lines(source: str) -> int:
    """Lines that carry a token of code, docstrings and comments left out."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            code.update(range(tok.start[0], tok.end[0] + 1))
    return len(code - docstrings)


def test_the_count_leaves_out_docstrings_comments_and_blank_lines():
    source = '"""Module.\n\nMore."""\n\n# a comment\ndef f(x):\n    """Doc."""\n    return (x +\n        1)\n'
    assert logic_lines(source) == 3


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_holds_more_than_600_lines_of_logic(path):
    assert logic_lines(path.read_text()) <= MAX_LOGIC_LINES, f"{path.relative_to(PACKAGE.parent)}: split it"
