"""Revision 0027: `episodes.has_sql_error` is NULL where rollscope's environment did not run the
episode's SQL (a Recorder's rollout, an import's without its question), so an average over such
a run is not "no query failed". A store at 0026 (where they read 0) upgrades so, with every
value rollscope measured kept."""

from __future__ import annotations

from dataclasses import replace

from rollout_core.records import IterationBatch
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

_HELD = (
    "SELECT r.name, e.has_sql_error FROM episodes e JOIN runs r ON r.id = e.run_id ORDER BY r.name"
)


def _elsewhere(batch: IterationBatch, *, ran_again: bool) -> IterationBatch:
    """The batch as an import writes it: its SQL run again here (with --questions) or not."""
    started = [replace(s, sql_run_here=ran_again) for s in batch.started]
    finished = [replace(e, progress=e.progress if ran_again else None) for e in batch.finished]
    return IterationBatch(started, batch.steps, finished)


def test_sql_errors_nobody_here_could_see_are_null_and_upgrade_from_zero(store_url: str) -> None:
    store = Store(store_url)
    try:
        for name, source, batch in (
            ("played", None, play("q1", 0, "wrong", 0.0, 2, sql_errors=1)),
            ("played-clean", None, play("q1", 0, "correct", 1.0, 2)),
            ("imported", "verl", _elsewhere(play("q2", 0, "wrong", 0.0, 2), ran_again=False)),
            ("checked", "verl", _elsewhere(
                play("q3", 0, "wrong", 0.0, 2, sql_errors=1), ran_again=True)),
            ("recorded", "recorder", _elsewhere(play("q4", 0, "wrong", 0.0, 2), ran_again=False)),
        ):  # fmt: skip
            run_id = store.create_run(spec(name), episodes_planned=1, source_format=source)
            store.sink(run_id).write(batch)
    finally:
        store.close()
    at_head = [
        ("checked", 1), ("imported", None), ("played", 1), ("played-clean", 0), ("recorded", None)
    ]  # fmt: skip
    assert [(n, None if v is None else int(v)) for n, v in sql_rows(store_url, _HELD)] == at_head

    downgrade_to(store_url, "0026")  # 0 stood in for what nobody here saw
    assert [v for _, v in sql_rows(store_url, _HELD)].count(None) == 0

    Store(store_url).close()  # a writer upgrades on open
    assert [(n, None if v is None else int(v)) for n, v in sql_rows(store_url, _HELD)] == at_head
