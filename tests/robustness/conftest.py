"""Fixtures of the robustness tests: a private copy of a real database, a PostgreSQL store."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import spider_dir
from tests.robustness.helpers import DbCopy
from tests.support.benchmark import make_benchmark
from tests.support.postgres import PgServer


@pytest.fixture()
def db_copy(tmp_path: Path) -> DbCopy:
    """Spider's concert_singer when present, else the fixture's concerts database."""
    root = tmp_path / "bench"
    spider = spider_dir()
    if spider is not None:
        db_id = "concert_singer"
        src = spider / "database" / db_id / f"{db_id}.sqlite"
        (root / "database" / db_id).mkdir(parents=True)
        shutil.copyfile(src, root / "database" / db_id / f"{db_id}.sqlite")
        source = "spider concert_singer"
    else:
        make_benchmark(root)
        db_id, source = "concerts", "fixture concerts"
    questions = root / "questions.json"
    item = {
        "id": "q0",
        "db_id": db_id,
        "question": "How many?",
        "query": "SELECT count(*) FROM singer",
    }
    questions.write_text(json.dumps([item]))
    db_file = root / "database" / db_id / f"{db_id}.sqlite"
    return DbCopy(questions, root / "database", db_file, source)


@pytest.fixture()
def pg_store_url(postgres_server: PgServer) -> Iterator[str]:
    """A new, empty PostgreSQL database on the session's server (skips without PostgreSQL)."""
    with postgres_server.database("rollscope_robust") as url:
        yield url
