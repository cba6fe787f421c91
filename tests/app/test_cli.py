"""`rollscope` as a user runs it: real subprocesses, a real SQLite store, exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import make_benchmark


def rollscope(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


@pytest.fixture()
def bench(tmp_path: Path) -> tuple[Path, Path]:
    return make_benchmark(tmp_path / "bench")


def test_run_then_runs_show_and_export(tmp_path: Path, bench: tuple[Path, Path]) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    questions, db_dir = bench
    res = rollscope(
        "run",
        "--policy",
        "oracle",
        "--questions",
        questions,
        "--db-dir",
        db_dir,
        "--store",
        store,
        "--samples",
        "2",
        "--name",
        "oracle-1",
        "--quiet",
    )
    assert res.returncode == 0, res.stderr
    assert "12 episodes" in res.stdout and "100.0%" in res.stdout

    listed = json.loads(rollscope("runs", "--store", store, "--json").stdout)
    assert [(r["name"], r["status"], r["episodes_finished"], r["accuracy"]) for r in listed] == [
        ("oracle-1", "completed", 12, 1.0)
    ]

    shown = rollscope("show", "1", "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert "Answer submitted: correct." in shown.stdout and "DESCRIBE" in shown.stdout

    out = tmp_path / "out.jsonl"
    exp = rollscope("export", "--run", "oracle-1", "--store", store, "--output", out)
    assert exp.returncode == 0, exp.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(len(r["steps"]) == 3 for r in rows)

    pq = tmp_path / "out.parquet"
    assert (
        rollscope(
            "export", "--run", "1", "--store", store, "--format", "parquet", "--output", pq
        ).returncode
        == 0
    )
    import pyarrow.parquet as papq

    assert papq.read_table(pq).num_rows == 12


def test_hf_checkpoint_runs_into_sqlite(
    tmp_path: Path, bench: tuple[Path, Path], tiny_checkpoint: Path
) -> None:
    db = tmp_path / "hf.db"
    questions, db_dir = bench
    res = rollscope(
        "run",
        "--policy",
        f"hf:{tiny_checkpoint}",
        "--questions",
        questions,
        "--db-dir",
        db_dir,
        "--store",
        db,
        "--step-budget",
        "2",
        "--max-new-tokens",
        "8",
        "--batch-size",
        "4",
        "--quiet",
    )
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    (status, fingerprint, checkpoint) = conn.execute(
        "SELECT status, checkpoint_fingerprint, checkpoint FROM runs"
    ).fetchone()
    assert status == "completed" and len(fingerprint) == 12
    assert checkpoint == str(tiny_checkpoint)
    steps = conn.execute("SELECT COUNT(*), MIN(tokens_in) FROM steps").fetchone()
    assert steps[0] >= 6 and steps[1] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--questions", "missing.json"], "missing.json"),
        (["--step-budget", "0"], "step-budget"),
        (["--batch-size", "0"], "batch-size"),
        (["--policy", "hf:/nonexistent/ckpt"], "checkpoint not found"),
        (["--policy", "gpt9"], "unknown policy"),
        (["--question-id", "nope"], "nope"),
    ],
)
def test_bad_input_is_one_line_and_leaves_no_run(
    tmp_path: Path, bench: tuple[Path, Path], args: list[str], message: str
) -> None:
    questions, db_dir = bench
    db = tmp_path / "s.db"
    base = ["--questions", questions, "--db-dir", db_dir]
    if args[0] == "--questions":
        base = []
    res = rollscope("run", *base, *args, "--store", db, "--quiet", cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    if db.exists():
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_missing_database_is_named(tmp_path: Path, bench: tuple[Path, Path]) -> None:
    questions, db_dir = bench
    items = json.loads(questions.read_text())
    items[0]["db_id"] = "nowhere"
    questions.write_text(json.dumps(items))
    res = rollscope(
        "run", "--questions", questions, "--db-dir", db_dir, "--store", tmp_path / "s.db", "--quiet"
    )
    assert res.returncode == 2 and "nowhere" in res.stderr


def test_bad_store_url(tmp_path: Path) -> None:
    res = rollscope("runs", "--store", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "store" in res.stderr


def test_duplicate_run_name(tmp_path: Path, bench: tuple[Path, Path]) -> None:
    questions, db_dir = bench
    args = [
        "run",
        "--questions",
        questions,
        "--db-dir",
        db_dir,
        "--store",
        tmp_path / "s.db",
        "--name",
        "same",
        "--limit",
        "1",
        "--quiet",
    ]
    assert rollscope(*args).returncode == 0
    again = rollscope(*args)
    assert again.returncode == 2 and "same" in again.stderr


def test_show_unknown_episode(tmp_path: Path) -> None:
    assert rollscope("migrate", "--store", tmp_path / "s.db").returncode == 0
    res = rollscope("show", "99", "--store", tmp_path / "s.db")
    assert res.returncode == 2 and "no episode 99" in res.stderr
