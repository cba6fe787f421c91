"""A recorded query run again in the sandbox, under the limits its run played under."""

from __future__ import annotations

import dataclasses


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
