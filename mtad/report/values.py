"""Small readings of a results frame's values shared by the tables, sweeps, claims and examples."""

from __future__ import annotations

from mtad.markdown import is_absent

is_missing = is_absent  # None or NaN: a value the cells did not give (nothing is ever filled in)


def present(values) -> list[str]:
    """The distinct values that are not missing, as sorted strings."""
    return sorted({str(v) for v in values if not is_missing(v)})


def in_order(values, preferred) -> list:
    """``values`` sorted by their place in ``preferred``, the others after them by value."""
    return sorted(values, key=lambda v: (preferred.index(v) if v in preferred else len(preferred), v))
