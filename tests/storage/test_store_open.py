"""Opening stores: URL forms, clear errors, engine reuse, pragmas and schema versions."""

from __future__ import annotations

import socket
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from storage.engine import SQLITE_PAGE_SIZE, StoreError, get_engine
from storage.migrations import head_revision
from storage.models import Base
from storage.store import Store
from storage.text_search import in_models
from tests.support.records import spec


def test_bare_path_and_sqlite_url_open_the_same_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    first = Store(str(path))
    run_id = first.create_run(spec(), episodes_planned=1)
    first.close()
    assert path.exists()
    again = Store(f"sqlite:///{path}")
    run = again.get_run(run_id)
    assert run is not None and run.name == "run-a"
    assert again.dialect == "sqlite"
    again.close()


def test_one_engine_per_url_per_process(store: Store) -> None:
    other = Store(store.url)
    assert other._engine is store._engine


def test_sqlite_pragmas(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "p.db"))
    with store._engine.connect() as conn:
        got = {
            p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
            for p in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
        }
    assert got == {
        "journal_mode": "wal",
        "busy_timeout": 30000,
        "foreign_keys": 1,
        "synchronous": 1,
    }
    store.close()


def test_a_new_store_has_large_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    def page_size(path: Path) -> int:
        with closing(sqlite3.connect(path)) as conn:
            return int(conn.execute("PRAGMA page_size").fetchone()[0])

    new = tmp_path / "new.db"
    Store(str(new)).close()
    assert page_size(new) == SQLITE_PAGE_SIZE
    # A store made with SQLite's default pages stays as it is, and takes writes.
    old = tmp_path / "old.db"
    with closing(sqlite3.connect(old)) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
    store = Store(str(old))
    run_id = store.create_run(spec(), episodes_planned=1)
    store.close()
    assert page_size(old) == 4096
    assert Store(str(old)).get_run(run_id) is not None


def test_a_writer_opening_a_new_store_waits_while_another_connection_holds_it(
    tmp_path: Path,
) -> None:
    """Writers that open a new store together: while one holds the file, still in rollback
    mode, in a write transaction, SQLite refuses another's switch to WAL at once instead of
    waiting out busy_timeout (six processes opening one new store lost that race one time in
    twenty). The opener waits until the file is free."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, holder.execute, ("ROLLBACK",))
    release.start()
    try:
        store = Store(str(path))
    finally:
        release.join()
        holder.close()
    run_id = store.create_run(spec(), episodes_planned=1)
    assert store.get_run(run_id) is not None
    store.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "empty store URL"),
        ("nosuchdb://host/x", "no driver for 'nosuchdb'"),
        ("postgresql+nosuchdriver://host/x", "no driver for 'postgresql+nosuchdriver'"),
        ("sqlite:///:memory:", "in-memory SQLite store keeps nothing"),
        (":memory:", "in-memory SQLite store keeps nothing"),
        ("sqlite:///{tmp}/missing/dir/x.db", "does not exist"),
        ("{tmp}", "is a directory"),
        ("{tmp}/notes.txt", "file is not a database"),
    ],
)
def test_bad_urls_raise_one_clear_line(tmp_path: Path, url: str, problem: str) -> None:
    (tmp_path / "notes.txt").write_text("not a database, just some text that is long enough" * 50)
    url = url.format(tmp=tmp_path)
    with pytest.raises(StoreError) as info:
        Store(url)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"cannot open store {url!r}:") or message.startswith(
        "cannot open store '"
    )
    assert problem in message
    assert message.endswith("(pass --store sqlite:///path.db or a postgresql+psycopg:// URL)")
    assert "\n" not in message


def test_unreachable_server_is_a_store_error() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg://someone:s3cret@127.0.0.1:{port}/rollscope"
    with pytest.raises(StoreError) as info:
        Store(url)
    message = str(info.value)
    assert message.startswith("cannot open store 'postgresql+psycopg://someone:***@127.0.0.1:")
    assert "s3cret" not in message and "\n" not in message
    assert message.endswith(
        "(check that the server is running and that its host, port, database, user and "
        "password are right; or pass --store sqlite:///path.db)"
    )


def test_a_foreign_database_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "concert_singer.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT)")
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"already holds tables .* \(singer\)"):
        Store(str(path))
    assert path.read_bytes() == before


def test_fresh_store_is_at_head_and_matches_the_models(store: Store) -> None:
    with store._engine.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        diff = compare_metadata(
            MigrationContext.configure(
                conn, opts={"compare_type": True, "include_name": in_models}
            ),
            Base.metadata,
        )
    assert version == head_revision()
    assert diff == [], "models and migrations disagree: add a revision"


def test_reopening_keeps_data(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    store.close()
    reopened = Store(store.url)
    assert reopened.get_run(run_id) is not None


def test_newer_schema_is_refused(store: Store) -> None:
    with get_engine(store._url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store.close()
    with pytest.raises(StoreError) as info:
        Store(store.url)
    assert str(info.value) == (
        f"store schema version 9999 is newer than this rollscope ({head_revision()}); "
        "upgrade rollscope"
    )


@pytest.mark.parametrize("revision", ["0009x", "abcdef123", "999"])
def test_a_schema_revision_rollscope_never_had_is_not_called_newer(
    store: Store, revision: str
) -> None:
    with get_engine(store._url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    store.close()
    with pytest.raises(StoreError) as info:
        Store(store.url)
    assert str(info.value) == (
        f"store schema version {revision!r} is not one rollscope knows (its newest is "
        f"{head_revision()}): another tool wrote this database, or its alembic_version was edited"
    )
