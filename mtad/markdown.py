"""The number formats and Markdown tables every report prints (tables, claims, bench, agreement,
gpu check, results pages): one spelling of a ratio, a signed figure, a missing value."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

MISSING = "–"  # what a table shows where a value is absent


def is_absent(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_number(value, pattern: str = "{:.2f}", missing: str = MISSING) -> str:
    """`value` through `pattern`, or `missing` when absent."""
    return missing if is_absent(value) else pattern.format(value)


def minus(text: str) -> str:
    """Typographic minus signs (what a reader of a table expects; a hyphen reads as a dash)."""
    return text.replace("-", "−")


def fmt_ratio(value, digits: int = 2) -> str:
    """1.23× (a speed-up, a ratio of two measurements)."""
    return fmt_number(value, f"{{:.{digits}f}}×")


def fmt_signed(value, digits: int = 3) -> str:
    """+0.143 / −0.018 (a difference)."""
    return MISSING if is_absent(value) else minus(f"{value:+.{digits}f}")


def fmt_percent(value, digits: int = 1, signed: bool = False) -> str:
    """A share or a relative change given as a fraction: 0.031 -> 3.1% (signed: +3.1%)."""
    if is_absent(value):
        return MISSING
    return minus(f"{100 * value:{'+' if signed else ''}.{digits}f}%")


def md_table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    """A Markdown table's lines: the header, its rule, one line per row (cells as given)."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]
