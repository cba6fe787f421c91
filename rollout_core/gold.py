"""The gold query's result for a question: run through a sandbox, once per sandbox."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rollout_core.grading import GoldResult
from rollout_core.sandbox import Sandbox, SandboxLimits
from rollout_core.sql_text import has_outer_order_by


class GoldQueryError(RuntimeError):
    """The gold query of a question failed, so its episodes cannot be graded."""


def gold_limits(limits: SandboxLimits) -> SandboxLimits:
    """The limits a gold query runs under: the sandbox's, with the gold deadline and row cap."""
    return replace(
        limits, deadline_seconds=limits.gold_deadline_seconds, fetch_rows=limits.gold_fetch_rows
    )


def gold_result(db_path: str | Path, sql: str, sandbox: Sandbox | None = None) -> GoldResult:
    """The rows `sql` returns on the database, and whether their order matters.

    In `sandbox` (cached there) with its limits; without one, in a sandbox of default limits
    opened for this call.
    """
    if sandbox is None:
        with Sandbox() as own:
            return gold_result(db_path, sql, own)
    limits = gold_limits(sandbox.limits)
    res = sandbox.run_select_cached(db_path, sql, limits)
    if res.error is not None:
        raise GoldQueryError(res.error)
    if res.truncated:
        raise GoldQueryError(
            f"the gold result has more than {limits.fetch_rows:,} rows;"
            " raise the sandbox's gold_fetch_rows to grade it whole"
        )
    return GoldResult(columns=res.columns, rows=res.rows, ordered=has_outer_order_by(sql))
