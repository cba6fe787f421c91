"""One SQLAlchemy engine per store URL and mode per process: SQLite tuned for several writers,
and reader engines that cannot write."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from rollout_core.errors import RollscopeError
from rollout_core.utf8 import holds_lone_surrogate
from storage.sqlite_reader import NoStoreFile, UnreadableStore, reader_mode, reader_uri

URL_HINT = "pass --store sqlite:///path.db or a postgresql+psycopg:// URL"

# Execution option that makes the next transaction on a SQLite connection BEGIN IMMEDIATE.
SQLITE_IMMEDIATE = "rollscope_sqlite_immediate"

SQLITE_PAGE_SIZE = 16384
"""Bytes per page of a new SQLite store. The runner's grouped writes (thousands of ~350-byte
step rows a transaction) run 6-7% faster than at SQLite's default 4096: fewer page splits and
WAL frames. A transaction of a few rows writes whole pages to the WAL, so one-iteration
transactions of 64 steps run 5-9% slower (figures: the sink benchmark)."""

BUSY_TIMEOUT_S = 30
"""How long a connection waits for another's lock before it fails with "database is locked"
(busy_timeout), and a writer opening a new store keeps trying to switch it to WAL."""

_ENGINES: dict[tuple[str, int, bool], Engine] = {}
_LOCK = threading.Lock()


class StoreError(RollscopeError, ValueError):
    """A store that cannot be opened or used; the message is one line naming the fix."""


class StoreMissing(StoreError):
    """A reader found no store yet: a missing or empty SQLite file, or an empty database."""


PERMISSION_DENIED = "42501"
"""PostgreSQL's SQLSTATE for a statement its user has no privilege for."""

SERVER_HINT = (
    "check that the server is running and that its host, port, database, user and password "
    "are right; or pass --store sqlite:///path.db"
)


def store_error(url: str, problem: str, hint: str = URL_HINT) -> StoreError:
    """The one-line error for a store that cannot be opened."""
    return StoreError(f"cannot open store {url!r}: {problem} ({hint})")


def why_unwritable(database: str) -> str | None:
    """Why this process cannot write a SQLite store here (a read-only file system, a file or
    folder without write permission); None when it can.

    A writer's open fails there with SQLite's "unable to open database file", which names
    neither the cause nor the fix. A WAL store needs its folder writable too: the -wal and
    -shm files go beside it.
    """
    file = Path(database).expanduser().resolve()
    blocked = [p for p in (file, file.parent) if p.exists() and not os.access(p, os.W_OK)]
    if not blocked:
        return None
    statvfs = getattr(os, "statvfs", None)  # not on Windows
    if statvfs is not None and statvfs(blocked[0]).f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    return f"{blocked[0]} is not writable by this user"


def unwritable_store(shown: str, database: str) -> StoreError | None:
    """The one-line error for a SQLite store this process cannot write, or cannot create
    (`shown`: the store as the user named it); None when it can."""
    why = why_unwritable(database)
    if why is None:
        return None
    if not Path(database).expanduser().exists():
        return StoreError(
            f"cannot create store {shown!r}: {why}; name a store in a folder this user can write"
        )
    return StoreError(
        f"cannot write to store {shown!r}: {why}; this command writes, so copy the store "
        "somewhere writable, or use a command that only reads it (runs, show, export, dashboard)"
    )


def normalize_url(url: str) -> URL:
    """Parse a store URL; a bare path (no `://`) means a SQLite file."""
    text = url.strip()
    if not text:
        raise store_error(url, "empty store URL")
    if text == ":memory:":
        raise store_error(url, "an in-memory SQLite store keeps nothing; name a file")
    if holds_lone_surrogate(text):
        # Bytes of a file name that are not UTF-8, as Python reads them from the command line.
        raise store_error(url, "it holds bytes that are not UTF-8 text; name the store in UTF-8")
    if "://" not in text:
        path = Path(text).expanduser().resolve()
        if _is_dir(url, path):
            raise store_error(url, "that path is a directory, not a database file")
        text = f"sqlite:///{path}"
    try:
        parsed = make_url(text)
    except ArgumentError as exc:
        raise store_error(url, f"not a SQLAlchemy URL ({exc})") from None
    if parsed.drivername == "postgresql":
        # The bare scheme means psycopg2 to SQLAlchemy; rollscope ships psycopg 3.
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if not db or db == ":memory:" or db.startswith("file:"):
            raise store_error(url, "an in-memory SQLite store keeps nothing; name a file")
        if db.startswith("~"):  # as for a bare path: SQLite itself would open a folder named ~
            parsed = parsed.set(database=str(Path(db).expanduser()))
        parent = Path(db).expanduser().resolve().parent
        if not _is_dir(url, parent):
            raise store_error(url, f"directory {str(parent)!r} does not exist")
    return parsed


def _is_dir(url: str, path: Path) -> bool:
    """Whether `path` is a folder; a store error where the file system will not look (a name
    past its length, for one)."""
    try:
        return path.is_dir()
    except OSError as exc:
        raise store_error(url, f"that path cannot be used ({exc.strerror})") from None


def get_engine(url: URL, *, read_only: bool = False) -> Engine:
    """The engine for a URL in this process (a forked worker builds its own).

    A read-only engine never writes: SQLite files open with `mode=ro` (or `immutable=1`, see
    `storage.sqlite_reader`) and no pragma that writes; PostgreSQL sessions default to
    read-only transactions. Other backends get no migration but no enforcement either.
    """
    key = (url.render_as_string(hide_password=False), os.getpid(), read_only)
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _create(url, read_only)
            _ENGINES[key] = engine
        return engine


def dispose_engine(url: URL, *, read_only: bool = False) -> None:
    """Close this process's pooled connections for a URL and forget its engine."""
    key = (url.render_as_string(hide_password=False), os.getpid(), read_only)
    with _LOCK:
        engine = _ENGINES.pop(key, None)
    if engine is not None:
        engine.dispose()


def _create(url: URL, read_only: bool) -> Engine:
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {}
    if backend == "postgresql" and url.get_driver_name() in {"psycopg", "psycopg2"}:
        # Fail in seconds, not minutes, when the server is unreachable.
        kwargs["connect_args"] = {"connect_timeout": 5}
        if read_only:
            # Every transaction of a reader is READ ONLY: the server refuses any write.
            options = str(url.query.get("options", ""))
            kwargs["connect_args"]["options"] = f"{options} -c default_transaction_read_only=on"
    if backend != "sqlite":
        # A dashboard keeps its engine for hours; the server may restart meanwhile.
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise store_error(str(url), f"no driver for {url.drivername!r} ({exc})") from None
    if backend == "sqlite" and read_only:
        _read_sqlite(engine, url)
    elif backend == "sqlite":
        _tune_sqlite(engine)
    return engine


def _read_sqlite(engine: Engine, url: URL) -> None:
    """Open every connection of a reader engine through a read-only `file:` URI."""
    path = Path(str(url.database)).expanduser().resolve()
    try:
        uri = reader_uri(path, reader_mode(path))
    except NoStoreFile as exc:
        raise StoreMissing(str(exc)) from None
    except UnreadableStore as exc:
        raise StoreError(str(exc)) from None

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        cargs[:] = [uri]
        cparams["uri"] = True

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # BEGIN comes from the "begin" hook, as for writers
        cur = dbapi_conn.cursor()
        # No journal_mode here: switching a rollback-journal file to WAL is a write.
        # A rollback-journal store is briefly locked while a writer commits: wait, not fail.
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred BEGIN takes no lock until the first read, and then only a shared one.
        conn.exec_driver_sql("BEGIN")


def _switch_to_wal(cur: sqlite3.Cursor) -> None:
    """`PRAGMA journal_mode=WAL`, again after a pause while another connection holds the file.

    On a file still in rollback mode (a new store) the switch upgrades a shared lock to an
    exclusive one, and SQLite answers "database is locked" at once, without waiting out
    busy_timeout, when another connection holds a lock: writers that open a new store
    together (`tests/robustness/test_concurrency.py`) lost that race one time in twenty.
    """
    pause, deadline = 0.005, time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def _tune_sqlite(engine: Engine) -> None:
    """Pragmas and explicit BEGIN for every SQLite connection of an engine."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own implicit BEGIN would hide ours; we issue BEGIN in the "begin" hook.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # Several runner processes share one file: wait for a lock instead of
        # failing at once with "database is locked".
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        # Takes effect on a new file only (before WAL is on): an existing store keeps its size.
        cur.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
        # WAL: readers (the dashboard) never block the writer and the writer never blocks them.
        _switch_to_wal(cur)
        # SQLite ignores REFERENCES (and ON DELETE CASCADE) unless asked per connection.
        cur.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL is crash-safe for the database; a power cut may lose only the
        # last transactions, and commits skip an fsync each (several times faster writes).
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock up front (BEGIN IMMEDIATE): a deferred transaction that
        # upgrades from read to write fails with SQLITE_BUSY at once, ignoring busy_timeout.
        immediate = conn.get_execution_options().get(SQLITE_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
