"""Revision 0026: `episodes.db_id`, `episodes.gold_sql` and `runs.dataset` are NULL where
nothing names them, so `IS NULL` (and pandas' `isna()`) finds an import's episodes without a
database or reference query; a store at 0025, where they held `''`, upgrades so, with every
named value as it was."""

from __future__ import annotations

from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec, start
from tests.support.store_files import downgrade_to

_HELD = (
    "SELECT r.name, r.dataset, e.db_id, e.gold_sql FROM episodes e "
    "JOIN runs r ON r.id = e.run_id ORDER BY r.name"
)


def test_what_nothing_names_is_null_and_upgrades_from_empty_text(store_url: str) -> None:
    store = Store(store_url)
    try:
        played = store.create_run(spec("played"), episodes_planned=1)
        store.sink(played).write(play("q1", 0, "correct", 1.0, 1))
        imported = store.create_run(
            spec("imported", kind="import", dataset=""), episodes_planned=1, source_format="verl"
        )
        unnamed = play("q2", 0, "wrong", 0.0, 1)
        unnamed.started[0] = start("q2", 0, db_id="", gold_sql="")
        store.sink(imported).write(unnamed)
        (episode_id,) = store.episode_ids(imported, [unnamed.started[0].key]).values()
        detail = store.get_episode(episode_id)
        assert detail is not None and (detail.summary.db_id, detail.gold_sql) == (None, None)
        assert store.list_db_ids() == ["concert_singer"]  # the filter offers no empty name
    finally:
        store.close()
    at_head = [
        ("imported", None, None, None),
        ("played", "demo", "concert_singer", "SELECT count(*) FROM t_q1"),
    ]
    assert sql_rows(store_url, _HELD) == at_head

    downgrade_to(store_url, "0025")  # as an earlier rollscope wrote them
    assert sql_rows(store_url, _HELD)[0] == ("imported", "", "", "")

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None and store.schema_upgrade.after == HEAD_REVISION
    finally:
        store.close()
    assert sql_rows(store_url, _HELD) == at_head
