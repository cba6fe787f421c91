"""Revision 0030: a run's `spec` holds only the settings that were used (an environment
server's run none of how to generate; `null` where it names no questions), and an episode's
`started_at` and `ended_at` span its `duration_seconds`. A store at 0029 holding what earlier
versions wrote there upgrades so."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rollout_core.records import PolicyInfo, RunSpec
from storage.store import Store
from tests.support.plain_sql import sql_rows, sql_run
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

_SPECS = "SELECT name, spec FROM runs ORDER BY name"
_TIMES = "SELECT started_at, ended_at, duration_seconds FROM episodes ORDER BY id"


def _specs(url: str) -> dict[str, dict[str, Any]]:
    """Each run's stored spec, as JSON text (SQLite) or a decoded value (PostgreSQL)."""
    return {n: s if isinstance(s, dict) else json.loads(s) for n, s in sql_rows(url, _SPECS)}


def _spans(url: str) -> list[tuple[float, float]]:
    """Each episode's `ended_at` minus `started_at`, and its `duration_seconds`."""

    def at(value: Any) -> datetime:
        return value if isinstance(value, datetime) else datetime.fromisoformat(value)

    rows = sql_rows(url, _TIMES)
    return [((at(end) - at(start)).total_seconds(), took) for start, end, took in rows]


def test_specs_hold_what_was_used_and_times_span_the_duration(store_url: str) -> None:
    store = Store(store_url)
    try:
        served = store.create_run(
            spec("served", kind="env"),
            episodes_planned=None,
            policy_info=PolicyInfo(name="env-server"),
        )
        store.create_run(
            spec("recorded", kind="training", dataset="", questions_path="", db_dir=""),
            episodes_planned=None,
            source_format="recorder",
        )
        played = store.create_run(spec("played", samples=2), episodes_planned=2)
        store.sink(served).write(play("q1", 0, "correct", 1.0, 2, duration=2.5))
        store.sink(played).write(play("q2", 0, "wrong", 0.0, 3, duration=0.75))
        store.sink(played).write(play("q3", 0, "wrong", 0.0, 1, duration=0.0))
    finally:
        store.close()
    at_head = _specs(store_url)
    assert "generation" not in at_head["served"] and "samples" not in at_head["served"]
    assert at_head["served"]["environment"]["step_budget"] == 5
    assert at_head["played"]["generation"]["temperature"] == 0.0
    assert at_head["played"]["samples"] == 2
    recorded = at_head["recorded"]
    assert (recorded["dataset"], recorded["questions_path"], recorded["db_dir"]) == (None,) * 3

    # What 0029's writers left: rollscope's generation defaults on the server's run, '' for
    # the names, and each episode stamped twice with the time of one write.
    downgrade_to(store_url, "0029")
    served_then = {**at_head["served"], "generation": {"temperature": 0.0}, "samples": 1}
    served_then |= {"limit": None, "question_ids": None}
    recorded_then = {**recorded, "dataset": "", "questions_path": "", "db_dir": ""}
    for name, then in (("served", served_then), ("recorded", recorded_then)):
        text = json.dumps(then).replace("'", "''")
        sql_run(store_url, f"UPDATE runs SET spec = '{text}' WHERE name = '{name}'")
    sql_run(store_url, "UPDATE episodes SET started_at = ended_at")
    assert [span for span, _ in _spans(store_url)] == [0.0, 0.0, 0.0]
    untouched = sql_rows(store_url, _TIMES)[2]  # its times agree with its duration already

    Store(store_url).close()  # a writer upgrades on open
    assert _specs(store_url) == at_head
    spans = [(round(span, 3), took) for span, took in _spans(store_url)]
    assert spans == [(2.5, 2.5), (0.75, 0.75), (0.0, 0.0)]
    assert sql_rows(store_url, _TIMES)[2] == untouched
    # And each reads back as the run it was.
    assert RunSpec.from_stored(at_head["recorded"]).dataset == ""
    assert RunSpec.from_stored(at_head["served"]).kind == "env"
