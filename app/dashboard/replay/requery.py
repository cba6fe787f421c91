"""Run a recorded QUERY (or a gold query) again in the sandbox; compare it with the record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from rollout_core.sandbox import SandboxLimits
from storage.read_models import RunSummary, StoredStep


@dataclass(frozen=True, slots=True)
class Rerun:
    """A query's result now, and whether it still shows as the recorded observation."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool
    error: str | None
    elapsed_seconds: float
    text: str
    """The result formatted as the environment shows it to the model."""
    matches: bool | None
    """True when it reads as recorded; None when there is no record to compare with."""


def can_run_sql(run: RunSummary) -> bool:
    """Whether the run can name a database to run SQL on: not a Recorder's, which keeps none."""
    return run.source_format != "recorder"


def db_path(run: RunSummary, db_id: str | None) -> Path:
    """Where a run's database lives: `<db_dir>/<db_id>/<db_id>.sqlite` of its dataset;
    ValueError, naming the fix, when the run or the episode names none."""
    db_dir = run.spec.get("db_dir")
    if not can_run_sql(run):
        raise ValueError("a Recorder's run names no databases: its SQL cannot be run here")
    if not db_dir and run.kind == "import":
        raise ValueError(
            "this imported run names no databases to run its SQL on; "
            "`rollscope import PATH --name NAME --questions F --db-dir D` records them"
        )
    if not db_dir:
        raise ValueError("the run records no db_dir; re-run it with a current rollscope")
    if not db_id:
        raise ValueError("this episode names no database to run its SQL on")
    return Path(str(db_dir)) / db_id / f"{db_id}.sqlite"


def limits_of(spec: Mapping[str, Any]) -> SandboxLimits:
    """The sandbox limits the run played under (a query run again must see the same row cap
    and timeout to read as recorded); the defaults for a spec that cannot be read."""
    try:
        return RunSpec.from_stored(dict(spec)).environment.sandbox
    except SpecError:
        return SandboxLimits()


def run_query(
    path: Path,
    sql: str,
    recorded: StoredStep | None = None,
    limits: SandboxLimits | None = None,
) -> Rerun:
    """Execute one SELECT read-only in the sandbox (the run's `limits`, else the defaults);
    compare with `recorded` when given."""
    from rollout_core.sandbox import format_rows, open_readonly, run_select

    if not path.is_file():
        raise FileNotFoundError(f"database {path} is missing; restore the dataset at that path")
    limits = limits or SandboxLimits()
    conn = open_readonly(path)
    try:
        result = run_select(conn, sql, limits)
    finally:
        conn.close()
    text = result.error if result.error is not None else format_rows(result, limits)
    return Rerun(
        columns=list(result.columns),
        rows=[tuple(r) for r in result.rows],
        truncated=result.truncated,
        error=result.error,
        elapsed_seconds=result.elapsed_seconds,
        text=text,
        matches=_matches(result.error, text, recorded),
    )


def _matches(error: str | None, text: str, recorded: StoredStep | None) -> bool | None:
    """Whether the result shows as the recorded one did; None with nothing recorded to compare
    (no step, or a step nothing answered)."""
    if recorded is None or (recorded.observation is None and recorded.error is None):
        return None
    if recorded.error is not None or error is not None:
        return recorded.error is not None and error is not None
    return (recorded.observation or "").strip() == text.strip()
