"""Plain SQL on a store by its URL (SQLite or PostgreSQL), as a person reads it: no rollscope
code between the test and the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text


def sql_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows a query returns, as tuples."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def sql_run(url: str, sql: str) -> None:
    """Run one statement and commit it."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()
