"""A recorded query run again in the sandbox, under the limits its run played under."""

from __future__ import annotations

import dataclasses

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


def test_where_a_query_runs_again_or_what_the_run_lacks() -> None:
    from app.dashboard.replay.requery import db_path

    assert str(db_path({"db_dir": "/data/db"}, "library")) == "/data/db/library/library.sqlite"
    with pytest.raises(ValueError, match="re-run it with a current rollscope"):
        db_path({"kind": "batch", "db_dir": ""}, "library")
    # An import names its databases only when made with --questions and --db-dir.
    with pytest.raises(ValueError, match="imported run names no databases") as lacking:
        db_path({"kind": "import", "db_dir": ""}, "library")
    assert "`rollscope import PATH --name NAME --questions F --db-dir D`" in str(lacking.value)
    # An episode that names no database is not looked for at `<db_dir>//.sqlite`.
    with pytest.raises(ValueError, match="this episode names no database"):
        db_path({"kind": "import", "db_dir": "/data/db"}, "")
