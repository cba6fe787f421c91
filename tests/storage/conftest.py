"""Store fixtures: every store test runs on a SQLite file and on a real PostgreSQL server
(`postgres_server`, from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.store import Store
from tests.support.postgres import PgServer


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(dialect: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of an empty store: a new SQLite file, or a new PostgreSQL database."""
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    server: PgServer = request.getfixturevalue("postgres_server")
    with server.database("rollscope_test") as url:
        yield url


@pytest.fixture
def store(dialect: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """An empty store at the newest schema (on PostgreSQL, a copy of one built once)."""
    if dialect == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            yield s
        finally:
            s.close()
        return
    server: PgServer = request.getfixturevalue("postgres_server")
    with server.store_database("rollscope_test") as url:
        s = Store(url)
        try:
            yield s
        finally:
            s.close()
