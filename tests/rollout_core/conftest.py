"""A small real SQLite file (rollback journal, like Spider's) for the sandbox and schema tests."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

_SCHEMA = '''
CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT NOT NULL, capacity INT);
CREATE TABLE singer (
    singer_id INTEGER PRIMARY KEY,
    name TEXT,
    age INT,
    stadium_id INT REFERENCES stadium(stadium_id)
);
CREATE TABLE "Odd ""Name""" (k TEXT, v REAL);
CREATE TABLE numbers (n INTEGER);
CREATE TABLE misc (id INTEGER, note TEXT, data BLOB);
CREATE VIEW adult_singers AS SELECT name FROM singer WHERE age >= 30;
'''


def build_db(path: Path) -> Path:
    """Create the test database at `path` and return it."""
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA)
    conn.executemany(
        "INSERT INTO stadium VALUES (?, ?, ?)", [(1, "Arena", 5000), (2, "Bowl", 1200)]
    )
    conn.executemany(
        "INSERT INTO singer VALUES (?, ?, ?, ?)",
        [(1, "Joe", 52, 1), (2, "Ann", 29, 2), (3, "Rose", 41, 1), (4, "Tim", 33, None)],
    )
    conn.executemany('INSERT INTO "Odd ""Name""" VALUES (?, ?)', [("a", 1.5), ("b", 2.25)])
    conn.executemany("INSERT INTO numbers VALUES (?)", [(i,) for i in range(100)])
    conn.execute("INSERT INTO misc VALUES (1, 'x' || char(10) || 'y', x'00ff10')")
    # Not valid UTF-8 as TEXT: Spider has a few of these; reads must not fail.
    conn.execute("INSERT INTO misc VALUES (2, CAST(x'ff41c3' AS TEXT), NULL)")
    conn.execute("INSERT INTO misc VALUES (3, ?, NULL)", ("long " * 100,))
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh test database alone in its own folder."""
    folder = tmp_path / "db"
    folder.mkdir()
    return build_db(folder / "test.sqlite")


FileState = tuple[str, list[str]]


def _file_state(path: Path) -> FileState:
    """The file's SHA-256 and the names in its folder: both must never change."""
    names = sorted(p.name for p in path.parent.iterdir())
    return hashlib.sha256(path.read_bytes()).hexdigest(), names


@pytest.fixture
def file_state() -> Callable[[Path], FileState]:
    """A function giving a database file's hash and its folder's listing."""
    return _file_state
