"""What DESCRIBE and SAMPLE show: tables, columns, keys and first rows of a sandboxed database.

These are trusted internal reads. They use the read-only `PRAGMA table_info` family through
`sandbox.trusted_reads`, which the authorizer allows only inside that block; the agent's SQL
(`sandbox.run_select`) can never run a PRAGMA.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from rollout_core.heap_limit import after_statements
from rollout_core.sandbox import (
    QueryResult,
    SandboxConnection,
    SandboxLimits,
    run_select,
    trusted_reads,
)

_NAME_QUOTES = "\"'`[]"
_COUNT_SECONDS = 2.0
_LISTED_TABLES = 60


def list_tables(conn: sqlite3.Connection) -> list[str]:
    """User tables and views, in the order the schema declares them."""
    rows = _trusted(
        conn,
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
    )
    return [str(row[0]) for row in rows]


def resolve_table(tables: list[str], name: str) -> str | None:
    """The name in `tables` that `name` means (any case, quotes stripped), or None."""
    wanted = _clean_name(name)
    if not wanted:
        return None
    if wanted in tables:
        return wanted
    folded = wanted.casefold()
    return next((t for t in tables if t.casefold() == folded), None)


def _clean_name(name: str) -> str:
    """Strip whitespace, a trailing `;`, quotes/backticks/brackets and a `main.` prefix."""
    text = str(name).strip().rstrip(";").strip()
    while len(text) >= 2 and text[0] in _NAME_QUOTES and text[-1] in _NAME_QUOTES:
        text = text[1:-1].strip()
    if text.lower().startswith("main."):
        text = _clean_name(text[5:])
    return text


def unknown_table_message(name: str, tables: list[str]) -> str:
    """The error shown for an unknown table: it names the tables that exist."""
    shown = ", ".join(tables[:_LISTED_TABLES])
    if len(tables) > _LISTED_TABLES:
        shown += f", ... ({len(tables) - _LISTED_TABLES} more)"
    return f"unknown table {name.strip()!r}; tables: {shown or '(none)'}"


def describe_table(
    conn: sqlite3.Connection, table: str, limits: SandboxLimits | None = None
) -> str:
    """Columns with types and keys, foreign keys and the row count of `table` (exact name).

    The count gets the limits' deadline (at most 2 s): on a huge table or a slow view it
    reads `row count unknown` rather than hold the episode up. sqlite3.Error where SQLite
    cannot read the table's columns: a virtual table whose module it lacks or the sandbox
    refuses, a view over a table that is gone.
    """
    limits = limits or SandboxLimits()
    # PRAGMA statements, not pragma_* table functions: those also ask to update sqlite_master.
    # table_xinfo, not table_info: generated columns too (hidden 2 and 3), which SAMPLE shows;
    # hidden 1 is a virtual table's hidden column.
    info = _trusted(conn, f"PRAGMA table_xinfo({_quote(table)})")
    columns = [(r[1], r[2], r[5]) for r in info if r[6] != 1]
    if not columns:
        return f"unknown table {table!r}"
    fk_rows = _trusted(conn, f"PRAGMA foreign_key_list({_quote(table)})")
    foreign = [(r[3], r[2], r[4]) for r in sorted(fk_rows, key=lambda r: (r[0], r[1]))]
    references = {str(src): f"{dst_table}({dst_col or '?'})" for src, dst_table, dst_col in foreign}
    count = _row_count(conn, table, min(_COUNT_SECONDS, limits.deadline_seconds))
    lines = [f"table {table} ({count})", "columns:"]
    for name, col_type, pk in columns:
        notes = []
        if pk:
            notes.append("primary key")
        if str(name) in references:
            notes.append(f"references {references[str(name)]}")
        suffix = f" ({', '.join(notes)})" if notes else ""
        lines.append(f"  {name} {str(col_type or '').strip() or 'ANY'}{suffix}")
    return "\n".join(lines)


def sample_table(
    conn: sqlite3.Connection, table: str, n: int = 5, limits: SandboxLimits | None = None
) -> QueryResult:
    """The first `n` rows of `table` (exact name), through the sandbox."""
    limits = limits or SandboxLimits()
    return run_select(conn, f"SELECT * FROM {_quote(table)} LIMIT {max(0, int(n))}", limits)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _row_count(conn: sqlite3.Connection, table: str, seconds: float) -> str:
    """`N rows`, or `row count unknown` when counting takes too long (huge BIRD tables)."""
    try:
        rows = _trusted(conn, f"SELECT count(*) FROM {_quote(table)}", seconds=seconds)
    except (sqlite3.Error, MemoryError):
        return "row count unknown"
    count = int(rows[0][0])
    return f"{count} row" if count == 1 else f"{count} rows"


def _trusted(
    conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = (), seconds: float = 10.0
) -> list[tuple[Any, ...]]:
    """Run internal SQL with the schema pragmas allowed and a deadline."""
    if not isinstance(conn, SandboxConnection):
        raise TypeError("schema reads need a connection from sandbox.open_readonly()")
    guard = conn.guard

    def read() -> list[tuple[Any, ...]]:
        with trusted_reads(conn):
            guard.deadline = time.monotonic() + seconds
            try:
                return list(conn.execute(sql, params).fetchall())
            finally:
                guard.reset()

    # Not the agent's SQL: an agent's query on another thread may hold the process's heap.
    return after_statements(read)
