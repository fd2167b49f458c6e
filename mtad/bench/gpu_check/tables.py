"""Markdown cells and tables, shared by the report and the checks' sections."""

from __future__ import annotations


def cell(value, fmt: str = ".3g") -> str:
    """`value` as a table cell: — for None, yes/no for a bool, numbers in `fmt`."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, fmt)
    return str(value)


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table's lines, a blank line after it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]
