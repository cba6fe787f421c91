"""A recorded query run again in the sandbox, under the limits its run played under."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest


def test_a_query_run_again_uses_the_sandbox_limits_its_run_played_under() -> None:
    from app.dashboard.replay import requery
    from rollout_core.datasets import load_named_dataset
    from rollout_core.sandbox import SandboxLimits
    from rollout_core.settings import EnvironmentSettings
    from tests.support.records import spec

    ds = load_named_dataset("demo")
    question = ds.questions[0]
    path = ds.db_path(question.db_id)
    sql = "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3"
    capped = dataclasses.replace(
        spec(), environment=EnvironmentSettings(sandbox=SandboxLimits(max_rows=1))
    )
    limits = requery.limits_of(capped.to_stored())
    assert limits.max_rows == 1
    again = requery.run_query(path, sql, limits=limits)
    # the observation text the model saw: one row shown, the rest counted
    assert again.text.splitlines()[1:] == ["1", "... 2 more rows"]
    assert requery.run_query(path, sql).text.splitlines()[1:] == ["1", "2", "3"]
    # a spec that cannot be read falls back to the defaults rather than failing the page
    assert requery.limits_of({"name": 3}) == SandboxLimits()


def _run(kind: str, db_dir: str, source: str | None = None) -> Any:
    """A run as the pages read it, with only what finding its database looks at."""
    from datetime import UTC, datetime

    from storage.read_models import RunSummary

    return RunSummary(
        id=1, name="r", status="completed", policy="p", checkpoint=None,
        checkpoint_fingerprint=None, dataset=None, created_at=datetime.now(UTC),
        started_at=None, ended_at=None, heartbeat_at=None, episodes_planned=0,
        episodes_finished=0, correct=0, accuracy=None, mean_reward=None, mean_steps=None,
        parse_failure_rate=None, error=None, spec={"db_dir": db_dir}, kind=kind,  # type: ignore[arg-type]
        source_format=source,
    )  # fmt: skip


def test_where_a_query_runs_again_or_what_the_run_lacks() -> None:
    from app.dashboard.replay.requery import can_run_sql, db_path

    played = _run("batch", "/data/db")
    assert str(db_path(played, "library")) == "/data/db/library/library.sqlite"
    with pytest.raises(ValueError, match="re-run it with a current rollscope"):
        db_path(_run("batch", ""), "library")
    # An import names its databases only when made with --questions and --db-dir.
    with pytest.raises(ValueError, match="imported run names no databases") as lacking:
        db_path(_run("import", "", "verl"), "library")
    assert "`rollscope import PATH --name NAME --questions F --db-dir D`" in str(lacking.value)
    # An episode that names no database is not looked for at `<db_dir>//.sqlite`.
    for unnamed in ("", None):
        with pytest.raises(ValueError, match="this episode names no database"):
            db_path(_run("import", "/data/db", "verl"), unnamed)
    # A Recorder keeps no database folder: nothing to run on, and no hint that would help.
    recorded = _run("training", "", "recorder")
    assert not can_run_sql(recorded) and can_run_sql(played)
    with pytest.raises(ValueError, match="a Recorder's run names no databases"):
        db_path(recorded, "library")


def test_a_query_run_again_matches_what_was_recorded_or_says_nothing_was() -> None:
    from app.dashboard.replay import requery
    from rollout_core.datasets import load_named_dataset
    from tests.support.records import step

    ds = load_named_dataset("demo")
    path = ds.db_path(ds.questions[0].db_id)
    sql = "SELECT 1 AS one"
    shown = requery.run_query(path, sql).text
    assert requery.run_query(path, sql, step("q", 0, 1, observation=shown)).matches is True
    assert requery.run_query(path, sql, step("q", 0, 1, observation="| 2 |")).matches is False
    # An imported turn nothing answered (NULL): no recorded result to differ from.
    assert requery.run_query(path, sql, step("q", 0, 1, observation=None)).matches is None
    failed = step("q", 0, 1, observation=None, error="no such table: t")
    assert requery.run_query(path, sql, failed).matches is False
