"""Revision 0014: a store at 0013 upgrades with its rows as they were, and takes imports; the
sink writes a record's source row and named rewards, and nothing for records without them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import create_engine, inspect, text

from rollout_core.records import IterationBatch, SourceRow
from storage.imports import FileBytes, FileRead
from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

NEW_TABLES = {"import_files", "episode_sources", "episode_rewards"}


@pytest.fixture
def at_0013(store_url: str) -> Iterator[tuple[str, int]]:
    """A store at revision 0013 holding a finished batch run: written at head, taken down."""
    store = Store(store_url)
    run_id = store.create_run(spec("before"), episodes_planned=2)
    sink = store.sink(run_id)
    sink.write(play("q1", 0, "correct", 1.0, 2))
    sink.write(play("q2", 0, "wrong", 0.0, 3))
    store.set_run_status(run_id, "completed")
    store.close()
    downgrade_to(store_url, "0013")
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            assert not NEW_TABLES & set(inspect(conn).get_table_names())
            assert "source_format" not in {c["name"] for c in inspect(conn).get_columns("runs")}
    finally:
        engine.dispose()
    yield store_url, run_id


def test_a_store_at_0013_upgrades_with_its_runs_as_they_were(at_0013: tuple[str, int]) -> None:
    url, run_id = at_0013
    store = Store(url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None
        assert (store.schema_upgrade.before, store.schema_upgrade.after) == ("0013", HEAD_REVISION)
        run = store.get_run(run_id)
        assert run is not None
        assert (run.source_format, run.source_path, run.skipped_lines) == (None, None, 0)
        assert (run.episodes_finished, run.correct, run.status) == (2, 1, "completed")
        assert [len(d.steps) for d in store.get_episodes([1, 2])] == [2, 3]
        # The migrated store takes an imported run's extras through the sink.
        imported = store.create_run(
            spec("imported", kind="import"), episodes_planned=0, source_format="verl",
            source_path="/data/rollouts",
        )  # fmt: skip
        [started] = store.begin_import_files(imported, [FileBytes("1.jsonl", b"\x01" * 32, 10, 1)])
        batch = play("q9", 0, "correct", 1.0, 1)
        finish = batch.finished[0]
        row = SourceRow(started.file_id, 1, b"\x02" * 32, "wrong", (1,))
        extra = replace(finish, rewards={"score": 1.0, "format": 0.5}, source=row)
        store.sink(imported).write(IterationBatch(batch.started, batch.steps, [extra]))
        read = FileRead(started.file_id, "1.jsonl", 1, 2, earlier=False, rows_gone=0)
        assert store.finish_import_files(imported, [read]) == [1]
        origins = store.episode_origins([3])
        assert origins[3].path == "1.jsonl" and origins[3].regraded == "wrong"
        assert origins[3].filled_steps == (1,) and origins[3].rewards == {
            "score": 1.0,
            "format": 0.5,
        }
        after = store.get_run(imported)
        assert after is not None and (after.skipped_lines, after.episodes_planned) == (2, 1)
    finally:
        store.close()


def test_records_without_extras_write_no_import_rows(store: Store) -> None:
    run_id = store.create_run(spec("plain"), episodes_planned=1)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    with store._engine.connect() as conn:
        for table in NEW_TABLES:
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0


def test_downgrading_drops_the_import_tables_and_keeps_the_runs(store_url: str) -> None:
    store = Store(store_url)
    run_id = store.create_run(
        spec("imp", kind="import"), episodes_planned=0, source_format="trl", source_path="/x"
    )
    store.begin_import_files(run_id, [FileBytes("a.parquet", b"\x03" * 32, 5, 2)])
    store.close()
    downgrade_to(store_url, "0013")
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            assert not NEW_TABLES & set(inspect(conn).get_table_names())
            names = conn.execute(text("SELECT name, kind FROM runs")).all()
            assert [tuple(r) for r in names] == [("imp", "import")]
    finally:
        engine.dispose()
