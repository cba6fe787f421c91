"""LIMIT as a number in the SQL text, not a bound parameter."""

from __future__ import annotations

from sqlalchemy import BindParameter, Integer, bindparam


def literal_limit(n: int) -> BindParameter[int]:
    """`n` for `Select.limit`, rendered into the statement when it runs (its compiled form is
    still cached). SQLite sorts for `ORDER BY ... LIMIT 51` keeping only the first 51 rows, but
    for `LIMIT ?` it sorts every row (docs/benchmarks.md has the figures)."""
    return bindparam(None, int(n), type_=Integer, literal_execute=True)
