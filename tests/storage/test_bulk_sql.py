"""The write path's executemany on SQLite: values converted as SQLAlchemy would, and the
driver's errors raised as SQLAlchemy's, so a lock is retried and a duplicate is refused."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    create_engine,
    insert,
)
from sqlalchemy.exc import IntegrityError, OperationalError

from storage.bulk_sql import chunks, executemany, executemany_values, insert_returning
from storage.writes import is_lock_error

_META = MetaData()
_ROWS = Table(
    "rows",
    _META,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String),
    Column("score", Float),
    Column("ok", Boolean),
    Column("blob", LargeBinary),
    Column("at", DateTime),
)
_DEFAULTED = Table(
    "defaulted",
    _META,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("note", String, server_default="n/a"),
    Column("n", Integer),
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "rows.db"
    engine = create_engine(f"sqlite:///{path}")
    _META.create_all(engine)
    engine.dispose()
    return path


def test_floats_of_any_numeric_type_are_stored_as_reals(db: Path) -> None:
    engine = create_engine(f"sqlite:///{db}")
    rows = [
        {"id": 1, "name": "a", "score": np.float32(0.25), "ok": True, "blob": b"\x00\x01"},
        {"id": 2, "name": "b", "score": 3, "ok": False, "blob": None},
        {"id": 3, "name": "c", "score": None, "ok": True, "blob": b""},
    ]
    with engine.begin() as conn:
        executemany(conn, insert(_ROWS), rows)
    engine.dispose()
    with sqlite3.connect(db) as raw:
        got = raw.execute(
            "SELECT id, score, typeof(score), ok, blob FROM rows ORDER BY id"
        ).fetchall()
    assert got == [
        (1, 0.25, "real", 1, b"\x00\x01"),
        (2, 3.0, "real", 0, None),
        (3, None, "null", 1, b""),
    ]


def test_a_duplicate_raises_sqlalchemys_integrity_error(db: Path) -> None:
    engine = create_engine(f"sqlite:///{db}")
    row = {"id": 1, "name": "a", "score": 1.0, "ok": True, "blob": None}
    with pytest.raises(IntegrityError, match="UNIQUE constraint failed"), engine.begin() as conn:
        executemany(conn, insert(_ROWS), [row, row])
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM rows").scalar() == 0
    engine.dispose()


def test_a_locked_file_raises_an_error_the_writer_retries(db: Path) -> None:
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    engine = create_engine(f"sqlite:///{db}", connect_args={"timeout": 0.05})
    row = {"id": 1, "name": "a", "score": 1.0, "ok": True, "blob": None}
    try:
        with pytest.raises(OperationalError) as caught, engine.begin() as conn:
            executemany(conn, insert(_ROWS), [row])
        assert is_lock_error(caught.value)
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()


def test_values_of_other_types_are_stored_as_sqlalchemy_stores_them(db: Path) -> None:
    """A DateTime goes to the driver as the text SQLAlchemy's own insert writes."""
    engine = create_engine(f"sqlite:///{db}")
    when = datetime(2026, 12, 1, 13, 5, 7, 120)
    with engine.begin() as conn:
        conn.execute(insert(_ROWS), [{"id": 1, "name": "core", "at": when}])
        executemany(conn, insert(_ROWS), [{"id": 2, "name": "bulk", "at": when}])
        executemany(conn, insert(_ROWS), [{"id": 3, "name": "none", "at": None}])
    engine.dispose()
    with sqlite3.connect(db) as raw:
        got = raw.execute("SELECT id, at, typeof(at) FROM rows ORDER BY id").fetchall()
    assert got[0][1:] == got[1][1:] == ("2026-12-01 13:05:07.000120", "text")
    assert got[2] == (3, None, "null")


def test_rows_as_values_in_any_key_order(db: Path) -> None:
    """executemany_values takes each row's values in the order of the keys it is given, not
    the table's; floats are converted and bytes kept, as with dict rows."""
    engine = create_engine(f"sqlite:///{db}")
    keys = ("score", "blob", "id", "name")
    with engine.begin() as conn:
        executemany_values(
            conn, insert(_ROWS), keys, [(np.float32(0.5), b"\x00", 7, "x"), (2, None, 8, "y")]
        )
    engine.dispose()
    with sqlite3.connect(db) as raw:
        got = raw.execute("SELECT id, name, score, typeof(score), blob FROM rows").fetchall()
    assert sorted(got) == [(7, "x", 0.5, "real", b"\x00"), (8, "y", 2.0, "real", None)]


def test_a_column_null_in_every_row_is_stored_null_not_its_default(db: Path) -> None:
    """executemany_values says NULL in the statement for a column that is None in every row
    (sqlite3 binds a None slowly): stored NULL, as a bound None is, never the column's default;
    the other values stay in their own columns, down to rows with one value or none."""
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        keys = ("id", "note", "n")
        executemany_values(conn, insert(_DEFAULTED), keys, [(1, None, 10), (2, None, None)])
        executemany_values(conn, insert(_DEFAULTED), keys, [(3, None, None), (4, None, None)])
        executemany_values(conn, insert(_DEFAULTED), keys, [(5, "x", None), (6, None, 60)])
        # Every value None: the INTEGER PRIMARY KEY takes the next rowid, as with bound Nones.
        executemany_values(conn, insert(_ROWS), ("id", "name"), [(None, None), (None, None)])
    engine.dispose()
    with sqlite3.connect(db) as raw:
        got = raw.execute("SELECT id, note, n FROM defaulted ORDER BY id").fetchall()
        rows = raw.execute("SELECT id, name FROM rows ORDER BY id").fetchall()
    assert got == [
        (1, None, 10),
        (2, None, None),
        (3, None, None),
        (4, None, None),
        (5, "x", None),
        (6, None, 60),
    ]
    assert rows == [(1, None), (2, None)]


def test_insert_returning_gives_each_new_rows_columns_over_many_statements(db: Path) -> None:
    """6,000 rows of 6 values are more parameters than one SQLite statement takes: the rows go
    in chunks, and every row comes back, its values stored as SQLAlchemy stores them."""
    engine = create_engine(f"sqlite:///{db}")
    when = datetime(2026, 12, 1, 13, 5, 7, 120)
    keys = ("id", "name", "score", "ok", "blob", "at")
    rows = [
        (i, f"r{i}", np.float32(i / 4), i % 2 == 0, bytes([i % 256]), when) for i in range(6000)
    ]
    with engine.begin() as conn:
        back = insert_returning(conn, _ROWS, keys, rows, ("id", "name"))
        conn.execute(insert(_ROWS), [{"id": 6000, "name": "core", "at": when}])
    engine.dispose()
    assert sorted(back) == [(i, f"r{i}") for i in range(6000)]
    with sqlite3.connect(db) as raw:
        got = raw.execute("SELECT id, score, typeof(score), ok, blob, at FROM rows").fetchall()
    assert len(got) == 6001
    assert got[4001] == (4001, 1000.25, "real", 0, bytes([4001 % 256]), got[6000][5])


def test_insert_returning_raises_sqlalchemys_integrity_error_and_keeps_no_chunk(db: Path) -> None:
    """A duplicate in a later chunk: SQLAlchemy's IntegrityError (callers tell it by its
    class), and the transaction rolled back keeps none of the earlier chunks."""
    engine = create_engine(f"sqlite:///{db}")
    rows = [(i, "x") for i in range(20_000)] + [(5, "again")]
    with pytest.raises(IntegrityError), engine.begin() as conn:
        insert_returning(conn, _ROWS, ("id", "name"), rows, ("id",))
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM rows").scalar() == 0
    engine.dispose()


def test_each_rows_values_are_converted_whatever_the_row_before_held(db: Path) -> None:
    """Values converted by their type (a DateTime) that repeat, change back and go NULL from
    row to row: each row stores its own."""
    engine = create_engine(f"sqlite:///{db}")
    a, b = datetime(2026, 1, 2, 3, 4, 5), datetime(2027, 6, 7, 8, 9, 10, 11)
    moments = [a, a, b, None, a, b, b, None, None, a]
    with engine.begin() as conn:
        executemany(conn, insert(_ROWS), [{"id": i, "at": m} for i, m in enumerate(moments)])
    engine.dispose()
    with sqlite3.connect(db) as raw:
        got = [at for (at,) in raw.execute("SELECT at FROM rows ORDER BY id")]
    text = {a: "2026-01-02 03:04:05.000000", b: "2027-06-07 08:09:10.000011", None: None}
    assert got == [text[m] for m in moments]


@pytest.mark.parametrize("most", [1, 5, 1024, 1057])
def test_chunks_cover_the_rows_in_order_in_powers_of_two(most: int) -> None:
    top = 1 << (most.bit_length() - 1)  # the largest power of two up to `most`
    for n in [*range(40), 1900, 16_384, 16_385]:
        got = chunks(n, most)
        ends = [start + size for start, size in got]
        assert [start for start, _ in got] == [0, *ends][: len(got)]
        assert ends[-1:] == ([n] if n else [])
        assert all(size & (size - 1) == 0 and size <= top for _, size in got)
        smaller = [size for _, size in got if size < top]
        assert len(set(smaller)) == len(smaller)  # but the largest, each size once
