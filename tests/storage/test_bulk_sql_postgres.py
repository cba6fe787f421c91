"""The write path's bulk inserts on PostgreSQL go by COPY FROM STDIN: every value read back as
given (COPY's text format has its own escapes), defaults and NULLs kept apart, a duplicate
refused as SQLAlchemy refuses it, new rows' ids drawn from their sequence in order, and any
statement that is not a plain INSERT left to SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    insert,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError

from storage.bulk_sql import executemany, executemany_values, insert_returning
from tests.support.postgres import PgServer

pytestmark = pytest.mark.postgres

_META = MetaData()
_ROWS = Table(
    "rows",
    _META,
    Column("id", BigInteger, primary_key=True),  # serial
    Column("name", Text),
    Column("score", Float),
    Column("ok", Boolean),
    Column("blob", LargeBinary),
    Column("at", DateTime(timezone=True)),
    Column("note", String, server_default="n/a"),
)
_COUNTS = Table(
    "counts",
    _META,
    Column("key", String, primary_key=True),
    Column("n", Integer, nullable=False),
)


@pytest.fixture
def engine(postgres_server: PgServer) -> Iterator[Engine]:
    with postgres_server.database("bulk_sql") as url:
        engine = create_engine(url)
        _META.create_all(engine)
        try:
            yield engine
        finally:
            engine.dispose()


TEXTS = [
    "tab\there, newline\nthere, return\r, backslash \\ and \\N and \\. and \\\\",
    "quotes ' \" and a comma, <script>alert(1)</script>",
    "ünïcødé ✓ 🙂 and a lone combining mark \u0301",
    "",
    None,
]


def _statements(engine: Engine) -> list[str]:
    """The statements SQLAlchemy executes on the engine from now on."""
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


def test_copied_values_read_back_as_given(engine: Engine) -> None:
    when = datetime(2026, 12, 1, 13, 5, 7, 120, tzinfo=UTC)
    keys = ("name", "score", "ok", "blob", "at", "note")
    rows = [
        (text, np.float32(0.25) if i % 2 else 3, bool(i % 2) if i < 3 else i % 2, blob, when, None)
        for i, (text, blob) in enumerate(
            zip(TEXTS, [b"\x00\x01\\N", b"", None, b"\n\t", b"\xff"], strict=True)
        )
    ]
    seen = _statements(engine)
    with engine.begin() as conn:
        executemany_values(conn, insert(_ROWS), keys, rows)
        insert_returning(conn, _ROWS, ("name",), [("more",)], ("id",))
    # Both by COPY, past SQLAlchemy: no INSERT statement, a row or a thousand at a time.
    assert not [sql for sql in seen if "INSERT" in sql]
    with engine.connect() as conn:
        got = conn.execute(
            select(*(_ROWS.c[k] for k in keys))
            .where(_ROWS.c.name.is_distinct_from("more"))
            .order_by(_ROWS.c.id)
        ).all()
    assert [tuple(r) for r in got] == [
        (text, float(score), bool(ok), blob, when, None) for text, score, ok, blob, _, _ in rows
    ]


def test_a_column_left_out_takes_its_default_and_a_none_stays_null(engine: Engine) -> None:
    with engine.begin() as conn:
        executemany(conn, insert(_ROWS), [{"name": "a"}, {"name": "b"}])
        executemany(conn, insert(_ROWS), [{"name": "c", "note": None}])
    with engine.connect() as conn:
        got = conn.execute(select(_ROWS.c.name, _ROWS.c.note).order_by(_ROWS.c.id)).all()
    assert [tuple(r) for r in got] == [("a", "n/a"), ("b", "n/a"), ("c", None)]


def test_a_duplicate_raises_sqlalchemys_integrity_error_and_keeps_nothing(engine: Engine) -> None:
    with pytest.raises(IntegrityError, match="duplicate key"), engine.begin() as conn:
        executemany_values(conn, insert(_COUNTS), ("key", "n"), [("a", 1), ("b", 2), ("a", 3)])
    with engine.connect() as conn:
        assert conn.execute(select(_COUNTS)).all() == []


def test_insert_returning_gives_the_ids_the_rows_were_stored_under(engine: Engine) -> None:
    with engine.begin() as conn:
        first = insert_returning(conn, _ROWS, ("name",), [("before",)], ("id",))
        rows = [(f"r{i}", i / 4) for i in range(6000)]
        back = insert_returning(conn, _ROWS, ("name", "score"), rows, ("id", "name"))
        # Ids given: stored under them, through SQLAlchemy.
        assert insert_returning(conn, _ROWS, ("id", "name"), [(10**9, "x")], ("id",)) == [(10**9,)]
    with engine.connect() as conn:
        stored = conn.execute(select(_ROWS.c.id, _ROWS.c.name, _ROWS.c.score)).all()
    ids = [i for i, _ in back]
    assert [name for _, name in back] == [name for name, _ in rows]
    assert ids == sorted(ids) and len(set(ids)) == 6000 and ids[0] > first[0][0]
    assert {i: (name, score) for i, name, score in stored if i in set(ids)} == {
        i: row for i, row in zip(ids, rows, strict=True)
    }


def test_statements_other_than_a_plain_insert_go_through_sqlalchemy(engine: Engine) -> None:
    # An upsert copied would be refused as a duplicate; it must add to the count instead.
    upsert = pg_insert(_COUNTS)
    upsert = upsert.on_conflict_do_update(
        index_elements=[_COUNTS.c.key], set_={"n": _COUNTS.c.n + upsert.excluded.n}
    )
    with engine.begin() as conn:
        executemany(conn, insert(_COUNTS), [{"key": "a", "n": 1}])
        executemany(conn, upsert, [{"key": "a", "n": 2}, {"key": "b", "n": 5}])
        executemany(conn, insert(_COUNTS).values(n=7), [{"key": "c"}])
    with engine.connect() as conn:
        got = conn.execute(select(_COUNTS).order_by(_COUNTS.c.key)).all()
    assert [tuple(r) for r in got] == [("a", 3), ("b", 5), ("c", 7)]


def test_only_psycopg_3_copies() -> None:
    # psycopg2's cursor has no copy(): its rows keep SQLAlchemy's path.
    from sqlalchemy.dialects.postgresql import psycopg, psycopg2

    from storage.bulk_sql import _copied

    keys = ("key", "n")
    assert _copied(insert(_COUNTS), keys, psycopg.dialect())
    assert not _copied(insert(_COUNTS), keys, psycopg2.dialect())
