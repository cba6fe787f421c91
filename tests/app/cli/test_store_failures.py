"""A store failing under a command is told apart from a bug in rollscope's own SQL, with real
SQLite errors as SQLAlchemy raises them."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from app.cli.store_failures import store_trouble


def _sqlalchemy_error(db: Path, sql: str) -> OperationalError:
    """What SQLAlchemy raises for `sql` on a read-only connection to `db`."""
    engine = create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    except OperationalError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError(f"{sql} did not fail")


def test_store_trouble_is_told_apart_from_a_bug(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER)")
    readonly = _sqlalchemy_error(db, "INSERT INTO runs VALUES (1)")
    assert store_trouble(RuntimeError("run failed")) is None
    wrapped = RuntimeError("run failed: OperationalError")
    wrapped.__cause__ = readonly
    for exc in (readonly, wrapped):
        found = store_trouble(exc)
        assert found is not None
        assert found.cause.startswith("the store became read-only (")
        assert found.fix == "make its file and folder writable"
    # A mistake in rollscope's own SQL is a bug, not something the user can fix.
    assert store_trouble(_sqlalchemy_error(db, "SELECT no_such_column FROM runs")) is None


def test_a_postgresql_server_that_does_not_answer_is_store_trouble() -> None:
    import psycopg

    from tests.support.ports import free_port

    try:
        psycopg.connect(f"host=127.0.0.1 port={free_port()} user=x dbname=x connect_timeout=5")
    except psycopg.OperationalError as exc:
        refused = exc
    else:
        raise AssertionError("a closed port took a connection")
    assert refused.sqlstate is None  # no server, so no SQLSTATE to tell it by
    found = store_trouble(refused)
    assert found is not None and found.cause.startswith("the store server could not be reached")
    # A driver error that carries a SQLSTATE is told by it; one outside the classes a user can
    # act on (a syntax error, 42601) is rollscope's bug.
    bug = psycopg.errors.SyntaxError("syntax error at or near 'SELEC'")
    assert store_trouble(bug) is None
