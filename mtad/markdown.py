"""The number formats and Markdown tables every report prints (tables, claims, bench, agreement,
gpu check, draft measurement, results pages): one spelling of a ratio, a signed figure, an interval,
a missing value and a table line. Which column takes which format stays with each report."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

MISSING = "–"  # what a table shows where a value is absent


def is_absent(value) -> bool:
    """None or NaN: a value that was not given."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_number(value, pattern: str = "{:.2f}", missing: str = MISSING) -> str:
    """`value` through `pattern`, or `missing` when absent."""
    return missing if is_absent(value) else pattern.format(value)


def fmt_value(value, spec: str = ".3g", missing: str = MISSING) -> str:
    """Any value as a table cell: `missing` when absent, yes/no for a bool, a number through the
    format spec `spec`, anything else as its text."""
    if is_absent(value):
        return missing
    if isinstance(value, bool):  # before int: a bool is an int to isinstance
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return format(value, spec)
    return str(value)


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


def fmt_bounds(low, high, fmt: Callable[[object], str] = fmt_number) -> str:
    """An interval `[low, high]`, each bound through `fmt`; MISSING where either bound is absent."""
    if is_absent(low) or is_absent(high):
        return MISSING
    return f"[{fmt(low)}, {fmt(high)}]"


def with_bounds(text: str, low, high, fmt: Callable[[object], str] = fmt_number) -> str:
    """A figure already formatted and its interval, `text [low, high]`; `text` alone where a bound
    is absent."""
    return text if is_absent(low) or is_absent(high) else f"{text} {fmt_bounds(low, high, fmt)}"


def fmt_count_range(values: Iterable | None, unknown: str = "?") -> str:
    """The count that `values` share, or their range `lo–hi` when they differ (cells that did not
    all finish); `unknown` when none is present."""
    counts = sorted({int(v) for v in values if not is_absent(v)}) if values is not None else []
    if not counts:
        return unknown
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def fmt_set(values: Iterable, default: str = "unknown") -> str:
    """The distinct values present, as sorted text joined by commas (a whole float without its
    `.0`: a count read back through a float column); `default` when none is present."""
    texts = {str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in values if not is_absent(v)}
    return ", ".join(sorted(texts)) if texts else default


def md_row(cells: Iterable) -> str:
    """One line of a Markdown table, `| a | b |` (cells as their text; an empty one is `|  |`)."""
    return "| " + " | ".join(map(str, cells)) + " |"


def md_rule(align: str) -> str:
    """The line under a table's header, one column per letter of `align`: `---`, or `---:` for
    an `r` (a right-aligned column of numbers)."""
    return "|" + "".join("---:|" if a == "r" else "---|" for a in align)


def md_table(header: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> list[str]:
    """A Markdown table's lines: the header, its rule (`align` as `md_rule`'s; every column left
    by default), one line per row (cells as their text)."""
    return [md_row(header), md_rule(align or "l" * len(header)), *(md_row(row) for row in rows)]
