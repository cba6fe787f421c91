"""Schema reads for DESCRIBE and SAMPLE, and that they open no door for the agent's SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rollout_core.sandbox import SandboxConnection, open_readonly, run_select, trusted_reads
from rollout_core.schema import (
    describe_table,
    list_tables,
    resolve_table,
    sample_table,
    unknown_table_message,
)

FileState = tuple[str, list[str]]


@pytest.fixture
def conn(db_path: Path) -> Iterator[SandboxConnection]:
    connection = open_readonly(db_path)
    yield connection
    connection.close()


def test_list_tables_in_declaration_order(conn: SandboxConnection) -> None:
    assert list_tables(conn) == [
        "stadium",
        "singer",
        'Odd "Name"',
        "numbers",
        "misc",
        "adult_singers",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("singer", "singer"),
        ("SINGER", "singer"),
        ("  Singer ; ", "singer"),
        ("`singer`", "singer"),
        ('"singer"', "singer"),
        ("'singer'", "singer"),
        ("[singer]", "singer"),
        ("main.singer", "singer"),
        ('odd "name"', 'Odd "Name"'),
        ("Adult_Singers", "adult_singers"),
        ("singers", None),
        ("", None),
        ("``", None),
        ("sqlite_master", None),
    ],
)
def test_resolve_table(conn: SandboxConnection, name: str, expected: str | None) -> None:
    assert resolve_table(list_tables(conn), name) == expected


def test_describe_table_shows_columns_keys_and_count(conn: SandboxConnection) -> None:
    assert describe_table(conn, "singer") == (
        "table singer (4 rows)\n"
        "columns:\n"
        "  singer_id INTEGER (primary key)\n"
        "  name TEXT\n"
        "  age INT\n"
        "  stadium_id INT (references stadium(stadium_id))"
    )


def test_describe_table_odd_name_and_singular_count(conn: SandboxConnection) -> None:
    text = describe_table(conn, 'Odd "Name"')
    assert text.startswith('table Odd "Name" (2 rows)')
    assert "  v REAL" in text
    assert describe_table(conn, "adult_singers").startswith("table adult_singers (3 rows)")


def test_describe_unknown_table(conn: SandboxConnection) -> None:
    assert describe_table(conn, "nowhere") == "unknown table 'nowhere'"


def test_sample_table(conn: SandboxConnection) -> None:
    result = sample_table(conn, "singer", 2)
    assert result.error is None
    assert result.columns == ["singer_id", "name", "age", "stadium_id"]
    assert result.rows == [(1, "Joe", 52, 1), (2, "Ann", 29, 2)]
    assert sample_table(conn, 'Odd "Name"').rows == [("a", 1.5), ("b", 2.25)]
    assert sample_table(conn, "numbers").rows == [(i,) for i in range(5)]


def test_unknown_table_message_names_the_tables() -> None:
    assert unknown_table_message("singers", ["singer", "concert"]) == (
        "unknown table 'singers'; tables: singer, concert"
    )
    many = [f"t{i}" for i in range(70)]
    assert unknown_table_message("x", many).endswith("t59, ... (10 more)")
    assert unknown_table_message("x", []) == "unknown table 'x'; tables: (none)"


def test_schema_reads_leave_no_pragma_open_to_the_agent(
    conn: SandboxConnection, db_path: Path, file_state: Callable[[Path], FileState]
) -> None:
    before = file_state(db_path)
    describe_table(conn, "singer")  # runs PRAGMA table_info("singer") on the trusted path
    for sql in ['PRAGMA table_info("singer")', 'PRAGMA foreign_key_list("singer")']:
        result = run_select(conn, sql)
        assert result.error == "not authorized: PRAGMA"
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            conn.execute(sql)  # even past the text check, the authorizer refuses
    assert file_state(db_path) == before


def test_trusted_reads_still_refuse_writes_and_other_pragmas(conn: SandboxConnection) -> None:
    with trusted_reads(conn):
        for sql in [
            "PRAGMA writable_schema = 1",
            "PRAGMA journal_mode = WAL",
            "DELETE FROM singer",
        ]:
            with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
                conn.execute(sql)
    with pytest.raises(RuntimeError), trusted_reads(conn):
        raise RuntimeError("boom")
    assert conn.guard.trusted is False
