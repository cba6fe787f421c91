"""Readers never write: no migration, no ANALYZE, no write lock, and not a byte of the store."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from alembic.config import Config
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from rollout_core.records import EpisodeKey
from storage.engine import SQLITE_IMMEDIATE, StoreError, StoreMissing, get_engine
from storage.migrations import head_revision
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.postgres import PgServer
from tests.support.records import play, spec
from tests.support.store_files import (
    copy_store,
    files_beside,
    to_rollback_journal,
    upgrade_only_to,
    wal_header,
)
from tests.support.stores import fill_store


def read_everything(url: str, run_id: int, episode_ids: list[int]) -> None:
    """Every read a page, the CLI or an export makes, through a reader Store."""
    reader = Store(url, read_only=True)
    try:
        assert [r.name for r in reader.list_runs()] == ["run-a"]
        run = reader.get_run(run_id)
        assert run is not None and (run.episodes_finished, run.correct) == (2, 1)
        assert reader.find_run("run-a") is not None
        page = reader.list_episodes(EpisodeFilter(run_ids=(run_id,)), with_total=True)
        assert page.total == 2
        for episode_id in episode_ids:
            detail = reader.get_episode(episode_id)
            assert detail is not None and detail.steps
        assert len(list(reader.iter_episode_details(run_id))) == 2
        assert len(reader.compare_runs([run_id]).items) == 2
        assert reader.run_distributions([run_id])
        assert reader.list_db_ids() == ["concert_singer"]
        reader.run_tags(run_id)
        assert reader.finished_keys(run_id) == {EpisodeKey("q1", 0), EpisodeKey("q2", 0)}
    finally:
        reader.close()


# -- SQLite: the file stays byte for byte ---------------------------------------------------------


def test_reader_leaves_a_rollback_journal_store_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    run_id, episode_ids = fill_store(str(path))
    to_rollback_journal(path)
    before = files_beside(path)
    read_everything(str(path), run_id, episode_ids)
    assert files_beside(path) == before  # same bytes, and no journal, -wal or -shm appeared
    assert wal_header(path) is False  # a writer's open would have switched it to WAL


def test_reader_beside_a_live_writer_changes_neither_the_file_nor_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    run_id, episode_ids = fill_store(str(path))
    writer = Store(str(path))  # a live writer: its pooled connection keeps -wal and -shm
    writer.tag_run(run_id, "stage", "written")  # this commit is only in the -wal
    try:
        before = files_beside(path)
        assert {"store.db-wal", "store.db-shm"} <= before.keys()
        read_everything(str(path), run_id, episode_ids[:1])
        after = files_beside(path)
        # The -shm is shared memory, not data: readers record their read marks in it.
        assert {k: v for k, v in after.items() if k != "store.db-shm"} == {
            k: v for k, v in before.items() if k != "store.db-shm"
        }
        assert after.keys() == before.keys()
        reader = Store(str(path), read_only=True)
        assert reader.run_tags(run_id) == {"stage": "written"}  # read from the -wal
        reader.close()
    finally:
        writer.close()


def test_reader_of_a_closed_wal_store_leaves_the_file_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    run_id, episode_ids = fill_store(str(path))
    before = files_beside(path)
    assert list(before) == ["store.db"] and wal_header(path)
    read_everything(str(path), run_id, episode_ids)
    after = files_beside(path)
    assert after["store.db"] == before["store.db"]
    # In a writable folder SQLite itself creates the -wal (empty) and the -shm index a WAL
    # reader needs to follow a writer, and a read-only connection may not remove them.
    assert set(after) - set(before) <= {"store.db-wal", "store.db-shm"}
    assert (tmp_path / "store.db-wal").stat().st_size == 0


@pytest.mark.parametrize(
    ("name", "problem"),
    [("missing.db", "no store at"), ("empty.db", "is an empty file, not a store yet")],
)
def test_reader_creates_no_store(tmp_path: Path, name: str, problem: str) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    path = tmp_path / name
    before = files_beside(path)
    with pytest.raises(StoreMissing) as info:
        Store(str(path), read_only=True)
    message = str(info.value)
    assert "\n" not in message and problem in message
    assert f"rollscope migrate --store {path}" in message
    assert files_beside(path) == before


def test_reader_refuses_a_foreign_database_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "concert_singer.sqlite"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT)")
    before = files_beside(path)
    with pytest.raises(StoreError, match=r"already holds tables .* \(singer\)"):
        Store(str(path), read_only=True)
    assert files_beside(path)["concert_singer.sqlite"] == before["concert_singer.sqlite"]


def test_reader_runs_no_analyze(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    fill_store(str(path))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TABLE sqlite_stat1")  # what a writer's open fills
        conn.commit()
    to_rollback_journal(path)
    reader = Store(str(path), read_only=True)
    reader.list_runs()
    with pytest.raises(StoreError, match="opened read-only"):
        reader.optimize()
    reader.close()
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "sqlite_stat1" not in tables


def test_a_wal_store_with_commits_only_in_its_wal_opens_anywhere_writable(tmp_path: Path) -> None:
    # A copy of a store and its -wal without the -shm (a backup taken while a run wrote).
    path = tmp_path / "live" / "store.db"
    path.parent.mkdir()
    run_id, _ = fill_store(str(path))
    writer = Store(str(path))
    writer.tag_run(run_id, "stage", "in-wal")
    copy = copy_store(path, tmp_path / "copy")
    copy_store(Path(f"{path}-wal"), copy.parent)
    writer.close()
    reader = Store(str(copy), read_only=True)
    assert reader.run_tags(run_id) == {"stage": "in-wal"}
    reader.close()


# -- both dialects -------------------------------------------------------------------------------


def test_reader_refuses_every_write(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    reader = Store(store.url, read_only=True)
    assert reader.read_only and reader.schema_upgrade is None
    with pytest.raises(StoreError, match="opened read-only"):
        reader.create_run(spec("run-b"), episodes_planned=1)
    with pytest.raises(StoreError, match="opened read-only"):
        reader.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    with pytest.raises(StoreError, match="opened read-only"):
        reader.set_run_status(run_id, "completed")
    # Below the Store too: the connection itself cannot write.
    with pytest.raises(DBAPIError, match=r"read-only|readonly"), reader._engine.begin() as conn:
        conn.execute(text("UPDATE runs SET status = 'failed'"))
    assert [r.status for r in store.list_runs()] == ["running"]
    assert reader._engine is not store._engine  # one engine per URL *and mode*


def test_reader_on_an_empty_database_says_so(store_url: str) -> None:
    with pytest.raises(StoreMissing) as info:
        Store(store_url, read_only=True)
    message = str(info.value)
    assert "\n" not in message and "rollscope migrate --store" in message
    if store_url.startswith("sqlite"):
        assert not Path(store_url.removeprefix("sqlite:///")).exists()
    else:  # nothing was created in the database either
        with create_engine(store_url).connect() as conn:
            count = conn.execute(
                text("SELECT count(*) FROM information_schema.tables WHERE table_schema='public'")
            ).scalar()
        assert count == 0


def test_reader_does_not_block_a_writer(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=3)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    reader = Store(store.url, read_only=True)
    with reader._engine.connect() as held, held.begin():
        # The reader is mid-read, its transaction open, as a dashboard page or an export is.
        assert held.execute(text("SELECT count(*) FROM episodes")).scalar() == 1
        if store.dialect == "sqlite":
            # No lock a writer would wait for: a write with no patience at all succeeds.
            path = store._url.database
            assert path is not None
            with closing(sqlite3.connect(path, timeout=0, isolation_level=None)) as raw:
                raw.execute("BEGIN IMMEDIATE")
                raw.execute("UPDATE runs SET heartbeat_at = heartbeat_at")
                raw.execute("COMMIT")
        writer = Store(store.url)  # opening a writer (it migrates) does not wait either
        writer.sink(run_id).write(play("q2", 0, "wrong", 0.0, 3))
        if store.dialect == "sqlite":  # a WAL read keeps its snapshot to the end
            assert held.execute(text("SELECT count(*) FROM episodes")).scalar() == 1
        writer.close()
    # The next read sees the writer's commit: the live view the dashboard follows runs with.
    assert reader.get_run(run_id).episodes_finished == 2  # type: ignore[union-attr]
    reader.close()


def test_reader_opens_while_a_writer_holds_the_write_lock(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    with store._engine.connect() as conn:
        # Held until the block ends; the open (and first read) of a reader must not need it.
        conn = conn.execution_options(**{SQLITE_IMMEDIATE: True})
        with conn.begin():
            conn.execute(text("UPDATE runs SET status = 'failed'"))
            if store.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(7305146021)"))  # a migration's
            reader = Store(store.url, read_only=True)
            assert [r.status for r in reader.list_runs()] == ["running"]  # not yet committed
    assert reader.get_run(run_id).status == "failed"  # type: ignore[union-attr]
    reader.close()


@pytest.mark.postgres
def test_postgres_reader_sessions_are_read_only(postgres_server: PgServer) -> None:
    with postgres_server.database("rollscope_ro") as url:
        writer = Store(url)
        reader = Store(url, read_only=True)
        with reader._engine.connect() as conn:
            assert conn.execute(text("SHOW transaction_read_only")).scalar() == "on"
        with writer._engine.connect() as conn:
            assert conn.execute(text("SHOW transaction_read_only")).scalar() == "off"
        reader.close()
        writer.close()


# -- schema versions -----------------------------------------------------------------------------


def test_reader_refuses_an_older_schema_and_migrate_upgrades_it(
    store_url: str, newer_code: Config
) -> None:
    before = "0001"
    upgrade_only_to(store_url, newer_code, before)  # as an older rollscope left it
    with pytest.raises(StoreError) as info:
        Store(store_url, read_only=True)
    shown = store_url
    assert str(info.value) == (
        f"store at schema {before}, this rollscope needs 9001: "
        f"run `rollscope migrate --store {shown}`"
    )
    with create_engine(store_url).connect() as conn:  # the reader upgraded nothing
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == before
    writer = Store(store_url)
    assert writer.schema_upgrade is not None
    assert (writer.schema_upgrade.before, writer.schema_upgrade.after) == (before, "9001")
    writer.close()
    again = Store(store_url)
    assert again.schema_upgrade is not None
    assert (again.schema_upgrade.before, again.schema_upgrade.after) == ("9001", "9001")
    again.close()
    reader = Store(store_url, read_only=True)
    assert reader.list_runs() == []
    reader.close()


def test_reader_refuses_a_newer_schema(store: Store) -> None:
    with get_engine(store._url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError) as info:
        Store(store.url, read_only=True)
    assert str(info.value) == (
        f"store schema version 9999 is newer than this rollscope ({head_revision()}); "
        "upgrade rollscope"
    )
