"""Revision 0015: a step's timings are NULL where rollscope did not measure them. A store at
0014 (where they read 0.0) upgrades with its imported steps' timings and its env-server steps'
generation time NULL, and every measured timing as it was."""

from __future__ import annotations

from dataclasses import replace

from rollout_core.records import IterationBatch
from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to


def _timings(url: str) -> dict[str, set[tuple[float | None, float | None]]]:
    """Per run kind, the (policy_seconds, env_seconds) pairs its steps hold, read with SQL."""
    rows = sql_rows(
        url,
        "SELECT r.kind, s.policy_seconds, s.env_seconds FROM steps s "
        "JOIN episodes e ON e.id = s.episode_id JOIN runs r ON r.id = e.run_id",
    )
    out: dict[str, set[tuple[float | None, float | None]]] = {}
    for kind, policy, env in rows:
        out.setdefault(kind, set()).add((policy, env))
    return out


def _unmeasured(batch: IterationBatch, *, env: bool) -> IterationBatch:
    steps = [replace(s, policy_seconds=None, env_seconds=s.env_seconds if env else None)
             for s in batch.steps]  # fmt: skip
    return IterationBatch(batch.started, steps, batch.finished)


def test_unmeasured_timings_are_null_and_survive_a_round_trip(store_url: str) -> None:
    store = Store(store_url)
    for name, kind, batch in (
        ("played", "batch", play("q1", 0, "correct", 1.0, 2)),
        ("imported", "import", _unmeasured(play("q2", 0, "wrong", 0.0, 2), env=False)),
        ("served", "env", _unmeasured(play("q3", 0, "correct", 1.0, 2), env=True)),
    ):
        run_id = store.create_run(spec(name, kind=kind), episodes_planned=1)
        store.sink(run_id).write(batch)
    store.close()
    at_head = _timings(store_url)
    assert at_head["batch"] == {(0.01, 0.002)}
    assert at_head["import"] == {(None, None)}
    assert at_head["env"] == {(None, 0.002)}

    downgrade_to(store_url, "0014")  # the columns were NOT NULL: zeros stand in
    assert _timings(store_url) == {
        "batch": {(0.01, 0.002)}, "import": {(0.0, 0.0)}, "env": {(0.0, 0.002)},
    }  # fmt: skip

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None
        assert store.schema_upgrade.after == HEAD_REVISION
        (episode,) = store.get_episodes([2])
        assert [(s.policy_seconds, s.env_seconds) for s in episode.steps] == [(None, None)] * 2
        # The view over the rebuilt steps table still gives each step's prompt.
        assert store.get_episodes([1])[0].steps[1].prompt
    finally:
        store.close()
    assert _timings(store_url) == at_head
