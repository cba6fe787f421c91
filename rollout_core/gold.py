"""The gold query's result for a question: run once per (database, SQL), then cached."""

from __future__ import annotations

import threading
from pathlib import Path

from rollout_core.grading import GoldResult, gold_is_ordered
from rollout_core.sandbox import SandboxLimits, connection_for, run_select

# Gold queries are trusted and may return many rows; fetch enough to grade them exactly.
GOLD_LIMITS = SandboxLimits(deadline_seconds=30.0, fetch_rows=100_000)
_cache: dict[tuple[str, str], GoldResult] = {}
_lock = threading.Lock()


class GoldQueryError(RuntimeError):
    """The gold query of a question failed, so its episodes cannot be graded."""


def gold_result(db_path: str | Path, sql: str) -> GoldResult:
    """The rows `sql` returns on the database, and whether their order matters."""
    key = (str(db_path), sql)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    res = run_select(connection_for(db_path), sql, GOLD_LIMITS)
    if res.error is not None:
        raise GoldQueryError(res.error)
    gold = GoldResult(columns=res.columns, rows=res.rows, ordered=gold_is_ordered(sql))
    with _lock:
        _cache[key] = gold
    return gold
