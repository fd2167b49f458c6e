"""No measured figure is typed by hand into the project's prose.

The README and the packages' READMEs may state settings (``τ = 0.5``, ``top-p 0.9``), the paper's
own figures (``mtad/paper.py``) and figures inside blocks that a renderer writes from a committed
result (``<!-- rendered: ... -->`` ... ``<!-- /rendered -->``, the claims table, the draft
measurement; each block's own test re-renders it). Any other decimal, ×, % or unit-bearing
number is a measurement quoted from memory, which goes stale when the result is regenerated:
results are quoted in ``results/README.md``, which ``make results-readme`` renders.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtad.stats.intervals import CONFIDENCE, POWER

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "mtad").glob("*/README.md"))]

UNITS = r"(?:ms|µs|GB/s|tok/s|tokens/s|MiB|MB|GB|nats)\b"
FIGURE = re.compile(
    r"(?<![\w.\-/])[−+]?\d+(?:\.\d+)?\s?[×%]"  # a ratio or a share: 1.26×, 21.2 %
    rf"|(?<![\w.\-/])[−+]?\d+(?:\.\d+)?\s{UNITS}"  # a time, a rate, a size: 22.7 ms, 41.8 tok/s
    r"|(?<![\w.\-/])[−+]?\d+\.\d+(?![\w.])"  # any other decimal: 0.381
    r"|(?<![\w.])\d+(?:\.\d+)?e[−-]\d+"  # scientific: 1.8e-2
)
# what a setting or a version reads like just before its number
SETTING = re.compile(r"(?:[=≤≥<>]|top-p|top-k|lr|β2|Python|arXiv:?)\s*[~≈]?$")
# a limit or a goal's threshold: a round number after these words (a decimal there is a measurement)
LIMIT = re.compile(r"(?:under|over|at most|at least|within)\s*[~≈]?$")
# the suite's conventions, not measurements: the confidence of every interval and the power of every
# detectable effect
CONVENTIONS = {f"{round(CONFIDENCE * 100)}%", f"{round(POWER * 100)}%"}
RENDERED_BLOCKS = re.compile(
    r"<!-- rendered:.*?<!-- /rendered -->"
    r"|<!-- claims-table:start -->.*?<!-- claims-table:end -->"
    r"|<!-- draft-measurement:.*?<!-- /draft-measurement -->",
    re.S,
)


def prose(text: str) -> str:
    """The text a reader takes as the author's own words: no code, no rendered block."""
    text = RENDERED_BLOCKS.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def typed_figures(text: str, paper_text: str) -> list[tuple[int, str]]:
    """(line, figure) for every figure of `text`'s prose that is neither a setting nor the paper's."""
    found = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        for m in FIGURE.finditer(line):
            figure = m.group(0).strip()
            before = line[: m.start()]
            limit = LIMIT.search(before) and re.fullmatch(r"\d+\s?[×%]?|\d+\s\S+", figure)
            if figure in CONVENTIONS or SETTING.search(before) or limit or figure.replace(" ", "") in paper_text:
                continue
            found.append((number, figure))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_prose_quotes_no_measured_figure(doc):
    paper_text = (ROOT / "mtad" / "paper.py").read_text()
    found = typed_figures(doc.read_text(), paper_text)
    assert not found, f"{doc.relative_to(ROOT)} types measured figures by hand (quote results/README.md): {found}"


def test_the_rule_catches_a_typed_figure_and_spares_settings():
    text = (
        "MTAD ran at 0.94× SpS, 22.7 ms a step, α 0.381 and 1.8e-2 TV.\n"
        "Settings: τ = 0.5, top-p 0.9, Python 3.11, `print(41.8)` in code, a citation: arXiv 2403.10444.\n"
        "<!-- rendered: results/x.json -->\n0.55\n<!-- /rendered -->\n"
        "```\n1.23\n```\n"
        "The paper's 1.26× over SpS.\n"
        "Goals: within 10% of the measured one, at most 48 ms; measured: within 4.4%, over 1.07×.\n"
    )
    found = [(1, "0.94×"), (1, "22.7 ms"), (1, "0.381"), (1, "1.8e-2"), (6, "4.4%"), (6, "1.07×")]
    assert typed_figures(text, "1.26×") == found
