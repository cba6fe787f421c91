"""`rollscope` as a user runs it: real subprocesses, a real SQLite store, exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.benchmark import make_benchmark
from tests.support.cli import rollscope, rollscope_here


@pytest.fixture()
def bench(tmp_path: Path) -> tuple[Path, Path]:
    return make_benchmark(tmp_path / "bench")


def test_the_cli_starts_without_torch() -> None:
    # Every command pays the CLI's imports: the GPU stack loads only in the commands that
    # generate, and alembic and numpy only where a store needs upgrading or a file exporting.
    heavy = ("torch", "transformers", "trl", "ray", "numpy", "alembic")
    code = f"import sys, app.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("args", "code"), [(["migrate"], 0), (["runs"], 2)])
def test_a_stop_while_python_shuts_down_keeps_the_commands_exit_code(
    tmp_path: Path, args: list[str], code: int
) -> None:
    # SIGTERM as the process ends (a scheduler's stop just after the summary): the work is
    # done and the exit code set. Registered first, this atexit hook runs after the CLI's.
    store = str(tmp_path / ("new.db" if code == 0 else "missing/none.db"))
    script = (
        "import atexit, os, signal, sys; "
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM)); "
        "from app.cli import main; "
        f"sys.argv = ['rollscope', *{args!r}, '--store', {store!r}]; main()"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert res.returncode == code, res.stderr[-2000:]


def test_run_then_runs_and_show(tmp_path: Path, bench: tuple[Path, Path]) -> None:
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
    tmp_path: Path,
    bench: tuple[Path, Path],
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    questions, db_dir = bench
    db = tmp_path / "s.db"
    base: list[str | Path] = ["--questions", questions, "--db-dir", db_dir]
    if args[0] == "--questions":
        base = []
    monkeypatch.chdir(tmp_path)
    res = rollscope_here(monkeypatch, capsys, "run", *base, *args, "--store", db, "--quiet")
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
    args: list[str | Path] = [
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


def test_a_bug_keeps_its_traceback_while_bad_input_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KeyError from rollscope's own code is a bug to report, not a message to the user."""
    from app import batch, cli

    store = str(tmp_path / "store.db")

    def buggy(*args: object, **kwargs: object) -> None:
        raise KeyError("missing_setting")

    monkeypatch.setattr(batch, "prepare", buggy)
    monkeypatch.setattr(sys, "argv", ["rollscope", "run", "--store", store, "--quiet"])
    with pytest.raises(KeyError, match="missing_setting"):
        cli.main()
    monkeypatch.setattr(sys, "argv", ["rollscope", "run", "--store", store, "--samples", "0"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == "error: --samples must be at least 1, got 0"


def test_resume_takes_no_settings_and_refuses_a_completed_run(
    tmp_path: Path, bench: tuple[Path, Path]
) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    questions, db_dir = bench
    done = rollscope(
        "run", "--questions", questions, "--db-dir", db_dir, "--store", store, "--name", "done",
        "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    res = rollscope("run", "--resume", "done", "--temperature", "0.5", "--store", store)
    assert res.returncode == 2
    assert "--temperature cannot change a stored run" in res.stderr
    res = rollscope("run", "--resume", "done", "--store", store)
    assert res.returncode == 2 and "already completed" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
