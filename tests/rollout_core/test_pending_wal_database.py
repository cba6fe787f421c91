"""A WAL-mode database with a `-wal` file beside it, writes never checkpointed (a database
copied while its writer had it open): SQLite reads those writes only where it may make the
`-shm` beside it. On a read-only file system the refusal says so and how to finish them, not
that the file is no database."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.cli import rollscope_cmd
from tests.support.mounts import run_read_only


def test_a_pending_write_ahead_log_on_a_read_only_disk_says_how_to_finish_it(
    tmp_path: Path,
) -> None:
    source = tmp_path / "writer" / "w.sqlite"
    source.parent.mkdir()
    conn = sqlite3.connect(source)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t(a)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    conn.commit()
    data = tmp_path / "data"
    (data / "database" / "w").mkdir(parents=True)
    shutil.copy(source, data / "database" / "w" / "w.sqlite")  # copied while open: log pending
    shutil.copy(f"{source}-wal", data / "database" / "w" / "w.sqlite-wal")
    conn.close()
    question = {"db_id": "w", "question": "How many rows?", "query": "SELECT count(*) FROM t"}
    (data / "dev.json").write_text(json.dumps([question]))
    view = tmp_path / "view"
    view.mkdir()
    store = tmp_path / "store.db"
    command = [*rollscope_cmd("run", "--questions", view / "dev.json", "--store", store)]
    done = run_read_only(data, view, command, cwd=Path(__file__).parents[2])
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "w.sqlite-wal beside it holds writes never finished" in said, said
    assert "not a readable SQLite database" not in said
    with closing(sqlite3.connect(data / "database" / "w" / "w.sqlite")) as check:
        assert check.execute("SELECT count(*) FROM t").fetchone() == (10,)


def test_a_broken_database_beside_an_empty_log_is_called_broken(tmp_path: Path) -> None:
    from rollout_core.datasets import DatasetError, load_dataset

    folder = tmp_path / "database" / "w"
    folder.mkdir(parents=True)
    db = folder / "w.sqlite"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE t(a)")
        conn.commit()
    with db.open("r+b") as raw:  # the header kept, the schema page garbled
        raw.seek(100)
        raw.write(b"\xff" * 200)
    (folder / "w.sqlite-wal").touch()  # an empty log holds no writes
    question = {"db_id": "w", "question": "How many rows?", "query": "SELECT count(*) FROM t"}
    (tmp_path / "dev.json").write_text(json.dumps([question]))
    with pytest.raises(DatasetError, match="is not a readable SQLite database") as refused:
        load_dataset(tmp_path / "dev.json")
    assert "never finished" not in str(refused.value)
