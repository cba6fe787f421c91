"""`Store.rekey_questions`: a run's episodes of one question id moved to another (an import's
questions taking the ids a rollscope run has since given their texts), on SQLite and
PostgreSQL."""

from __future__ import annotations

from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec


def test_moved_samples_follow_those_the_run_holds_under_the_id(store: Store) -> None:
    run_id = store.create_run(spec("imp", kind="import"), episodes_planned=0, source_format="verl")
    other = store.create_run(spec("other", kind="import"), episodes_planned=0, source_format="verl")
    sink = store.sink(run_id)
    for q, sample in (("q-count", 0), ("q-count", 1), ("q-9f3", 0), ("q-9f3", 1), ("q-x", 0)):
        sink.write(play(q, sample, "correct", 1.0, 1))
    store.sink(other).write(play("q-9f3", 0, "correct", 1.0, 1))
    assert sorted(store.run_question_ids(run_id)) == ["q-9f3", "q-count", "q-x"]
    assert store.rekey_questions(run_id, {"q-9f3": "q-count"}) == 2
    assert store.rekey_questions(run_id, {}) == 0
    found = sql_rows(
        store.url,
        "SELECT r.name, e.question_id, e.sample_index FROM episodes e "
        "JOIN runs r ON r.id = e.run_id ORDER BY e.id",
    )
    assert found == [
        ("imp", "q-count", 0), ("imp", "q-count", 1), ("imp", "q-count", 2),
        ("imp", "q-count", 3), ("imp", "q-x", 0),
        ("other", "q-9f3", 0),  # another run's episodes stay
    ]  # fmt: skip
