"""LIMIT as a number in the SQL text, not a bound parameter."""

from __future__ import annotations

from sqlalchemy import BindParameter, Integer, bindparam


def literal_limit(n: int) -> BindParameter[int]:
    """`n` for `Select.limit`, rendered into the statement when it runs (its compiled form is
    still cached). SQLite sorts for `ORDER BY ... LIMIT 51` keeping only the first 51 rows, but
    not for `LIMIT ?`: the episode list sorted by reward over 1M episodes took 0.15 s against
    0.56 s (SQLite 3.40)."""
    return bindparam(None, int(n), type_=Integer, literal_execute=True)
