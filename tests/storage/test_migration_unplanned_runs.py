"""Revision 0029: `runs.episodes_planned` is NULL where a run sets out to play no number of
episodes (an env server's, a trainer's tools, a Recorder's), where it held 0 or the Recorder's
count so far: "0 planned" beside the episodes played read false, and a rate over it divided by
zero. A store at 0028 upgrades so, the runs that were asked for a number keeping it."""

from __future__ import annotations

from rollout_core.records import PolicyInfo
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

_PLANNED = "SELECT name, episodes_planned, finished_episodes FROM runs ORDER BY name"


def test_runs_that_plan_no_number_hold_null_and_upgrade_from_what_they_held(
    store_url: str,
) -> None:
    store = Store(store_url)
    # (run, kind, source format, policy reported, episodes planned as its producer writes it)
    producers: list[tuple[str, str, str | None, str | None, int | None]] = [
        ("batch", "batch", None, "hf", 1),
        ("trained", "training", None, "hf", 4),
        ("imported", "import", "verl", None, 1),
        ("recorded", "training", "recorder", None, None),
        ("served", "env", None, "env-server", None),
        ("tools", "training", None, "tools", None),
    ]
    try:
        for name, kind, source, policy, planned in producers:
            run_id = store.create_run(
                spec(name, kind=kind),
                episodes_planned=planned,
                source_format=source,
                policy_info=None if policy is None else PolicyInfo(name=policy),
            )
            store.sink(run_id).write(play(name, 0, "correct", 1.0, 2))
    finally:
        store.close()
    at_head = [(name, planned, 1) for name, *_, planned in sorted(producers)]
    assert sql_rows(store_url, _PLANNED) == at_head
    rate = "SELECT name FROM runs WHERE finished_episodes * 1.0 / episodes_planned IS NULL"
    assert sql_rows(store_url, rate + " ORDER BY name") == [("recorded",), ("served",), ("tools",)]

    downgrade_to(store_url, "0028")  # 0, or the Recorder's count so far, stood in
    before = dict((n, p) for n, p, _ in sql_rows(store_url, _PLANNED))
    assert (before["served"], before["tools"], before["recorded"]) == (0, 0, 1)

    Store(store_url).close()  # a writer upgrades on open
    assert sql_rows(store_url, _PLANNED) == at_head
