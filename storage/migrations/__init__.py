"""Schema versions: a writing Store upgrades its database to the newest revision on open; a
reading Store only checks the revision and refuses, in one line, one it cannot read.

A store already at `HEAD_REVISION` opens without alembic: importing it was a fifth of every
CLI call's start-up. Anything else (a new, older or newer store) goes through alembic, once per
process for a new SQLite store: the schema the revisions build in memory is replayed into each
new file (`_sqlite_head_schema`), which need not rebuild its tables revision by revision.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.pool import StaticPool

from storage.engine import SQLITE_IMMEDIATE, StoreError, StoreMissing, why_unwritable

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

_HERE = Path(__file__).resolve().parent

HEAD_REVISION = "0031"
"""The newest revision in `versions/`; tests/storage/test_migrations.py holds it to the
scripts' own head, so a new revision that forgets it fails there."""


class NotAStore(Exception):
    """The database exists but is not a rollscope store; the message says what it is."""


@dataclass(frozen=True, slots=True)
class SchemaUpgrade:
    """What opening a store for writing did to its schema."""

    before: str | None
    """The revision found; None for a new (empty) store."""
    after: str
    """The revision now: the newest this code knows."""


# Any constant works; it names the lock that serializes concurrent upgrades on PostgreSQL.
_PG_LOCK_KEY = 7_305_146_021


def alembic_config() -> Config:
    """Alembic configured in code (no ini file) to run this package's revisions."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE))
    return cfg


def _scripts(cfg: Config) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(cfg)


def head_revision() -> str:
    """The newest schema revision this code knows, as alembic reads its scripts."""
    head = _scripts(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision a database is at; None for an empty one."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def at_head(conn: Connection) -> bool:
    """True when the store is at `HEAD_REVISION`, read without alembic (and without writing)."""
    if not inspect(conn).has_table("alembic_version"):
        return False
    found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return found == [HEAD_REVISION]


def upgrade_to_head(engine: Engine) -> SchemaUpgrade:
    """Bring a store to the newest schema; refuse a store made by a newer rollscope."""
    with engine.connect() as conn:
        if at_head(conn):
            return SchemaUpgrade(HEAD_REVISION, HEAD_REVISION)
    from alembic import command

    cfg = alembic_config()
    script = _scripts(cfg)
    head = script.get_current_head()
    assert head is not None
    with engine.connect() as conn, sqlite_foreign_keys_off(conn):
        # BEGIN IMMEDIATE on SQLite: two processes opening a new store migrate one at a time.
        conn = conn.execution_options(**{SQLITE_IMMEDIATE: True})
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            current = current_revision(conn)
            if current == head:
                return SchemaUpgrade(current, head)
            if current is None:
                _refuse_foreign(sorted(inspect(conn).get_table_names()))
                if conn.dialect.name == "sqlite":
                    for statement in _sqlite_head_schema():
                        conn.exec_driver_sql(statement)
                    conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": head})
                    return SchemaUpgrade(None, head)
            elif _unknown(script, current):
                raise _newer(current, head)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            _check_foreign_keys(conn)
            return SchemaUpgrade(current, head)


@cache
def _sqlite_head_schema() -> tuple[str, ...]:
    """The CREATE statements of a new SQLite store at head, as the revisions leave them in an
    in-memory database: tables (an FTS5 table's own tables come with it), then indexes, views
    and triggers, each kind in the order it was created."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            from alembic import command

            with conn.begin():
                command.upgrade(cfg, "head")
            rows = conn.execute(
                text(
                    "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                    "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 "
                    "WHEN 'view' THEN 2 ELSE 3 END, rowid"
                )
            ).all()
    finally:
        engine.dispose()
    virtual = [name for name, sql in rows if sql.upper().startswith("CREATE VIRTUAL TABLE")]
    # An FTS5 table creates its shadow tables (`<name>_data`, ...) itself.
    return tuple(
        sql
        for name, sql in rows
        if not name.startswith("sqlite_") and not any(name.startswith(f"{v}_") for v in virtual)
    )


@contextmanager
def sqlite_foreign_keys_off(conn: Connection) -> Iterator[None]:
    """SQLite foreign keys off while migrating, on again after.

    A batch migration copies a table, drops the old one and renames the copy; with foreign
    keys on, that DROP deletes every row referring to the table (ON DELETE CASCADE): altering
    `runs` would empty `episodes` and `steps`. The pragma is a no-op inside a transaction, so
    it is set on the raw connection before BEGIN.
    """
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.driver_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys=ON")


def _check_foreign_keys(conn: Connection) -> None:
    """Refuse (rolling the migration back) a migrated SQLite store with dangling references."""
    if conn.dialect.name != "sqlite":
        return
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise StoreError(
            f"migrating left {len(broken)} rows referring to missing rows (first: {broken[0]}); "
            "the store was left as it was"
        )


def check_readable(conn: Connection, url: str, sqlite_file: str | None = None) -> None:
    """Refuse, in one line, a store a reader cannot use as it is; never writes.

    An older schema is not upgraded here: upgrading a colleague's store is a decision, made
    with `rollscope migrate`, not a side effect of looking at it. Where this user cannot write
    the store (`sqlite_file`), `migrate` would be refused too: the line says to copy it first.
    """
    if at_head(conn):
        return
    script = _scripts(alembic_config())
    head = script.get_current_head()
    assert head is not None
    current = current_revision(conn)
    if current == head:
        return
    if current is None:
        tables = sorted(inspect(conn).get_table_names())
        _refuse_foreign(tables)
        raise StoreMissing(
            f"{url} holds no rollscope store yet (a reader creates nothing): check the URL, or "
            f"create a store there with `rollscope migrate --store {url}`"
        )
    if _unknown(script, current):
        raise _newer(current, head)
    fix = f"run `rollscope migrate --store {url}`"
    if sqlite_file and (why := why_unwritable(sqlite_file)) is not None:
        fix = f"{why}, so copy the store somewhere writable and run `rollscope migrate` on the copy"
    raise StoreError(f"store at schema {current}, this rollscope needs {head}: {fix}")


def _newer(current: str, head: str) -> StoreError:
    """The refusal of a revision this rollscope lacks: a later one of its own numbering
    (upgrade rollscope), or one it never had (another tool's, or edited by hand)."""
    if current.isdecimal() and len(current) == len(head) and current > head:
        return StoreError(
            f"store schema version {current} is newer than this rollscope ({head}); "
            "upgrade rollscope"
        )
    return StoreError(
        f"store schema version {current!r} is not one rollscope knows (its newest is {head}): "
        "another tool wrote this database, or its alembic_version was edited"
    )


def check_sqlite_file(path: str) -> None:
    """Refuse an existing SQLite file that is not a store, before anything writes to it.

    Opening it through the engine would already switch it to WAL mode; a read-only look
    leaves a benchmark's database byte for byte as it was.
    """
    file = Path(path)
    if not file.is_file() or file.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError as exc:
        raise NotAStore(str(exc)) from None
    tables = {name for (name,) in rows}
    if "alembic_version" not in tables:
        _refuse_foreign(sorted(tables))


def _refuse_foreign(tables: list[str]) -> None:
    """Never create store tables inside some other database (a benchmark's, say)."""
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise NotAStore(
            f"this database already holds tables that are not a rollscope store ({shown}); "
            "point the store at a new file or an empty database"
        )


def _unknown(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is None
    except Exception:  # alembic raises CommandError/ResolutionError for unknown ids
        return True
