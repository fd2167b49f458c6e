"""A bench row found by what it measured, never by its label (labels are for people and may change).

Every row of `bench.json` records its implementation (`impl`: "ours" or "hf"), method, decode path,
variant (adaptive drafting, a node budget; none for the fixed method) and target dtype (none: the
pair's own)."""

from __future__ import annotations


def row_key(row: dict) -> tuple:
    """(impl, method, path, variant, target_dtype), an absent variant or dtype as None."""
    return row["impl"], row["method"], row["path"], row.get("variant") or None, row.get("target_dtype") or None


def find_row(
    rows: list[dict],
    method: str,
    path: str = "fast",
    impl: str = "ours",
    variant: str | None = None,
    target_dtype: str | None = None,
) -> dict | None:
    """The row that measured `method` on `path` as `impl`, with `variant` and `target_dtype`; None if none did."""
    want = (impl, method, path, variant, target_dtype)
    return next((r for r in rows if row_key(r) == want), None)


def tokens_per_s(rows: list[dict], method: str, path: str = "fast", **settings) -> float | None:
    """`find_row`'s tokens/s, None where the bench has no such row."""
    row = find_row(rows, method, path, **settings)
    return row["tokens_per_s"] if row else None
