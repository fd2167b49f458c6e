"""Markdown cells and tables, shared by the report and the checks' sections: `mtad.markdown`'s,
with the GPU check's own mark for an absent value."""

from __future__ import annotations

from mtad.markdown import fmt_value, md_table

ABSENT = "—"  # what the GPU check's tables show where a value is absent


def cell(value, fmt: str = ".3g") -> str:
    """`value` as a table cell: — when absent, yes/no for a bool, numbers in `fmt`."""
    return fmt_value(value, fmt, missing=ABSENT)


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table's lines, a blank line after it (a check's section continues below)."""
    return [*md_table(header, rows), ""]
