"""`rollscope run --policy openai:URL` against a real `transformers serve`: a batch into the
store, the key kept out of it, bad flags refused, and a server killed mid-run then restarted."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.store import Store
from tests.conftest import REPO
from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.cli import in_process, rollscope
from tests.support.ports import free_port
from tests.support.serving import ServedModel


@pytest.fixture()
def bench(tmp_path: Path) -> tuple[Path, Path]:
    return make_benchmark(tmp_path / "bench")


def openai_args(server: ServedModel, *extra: str | Path) -> list[str | Path]:
    return ["run", "--policy", f"openai:{server.base_url}/", "--model", server.model, *extra]


def test_a_batch_through_the_server_is_recorded(
    tmp_path: Path, bench: tuple[Path, Path], openai_server: ServedModel
) -> None:
    db = tmp_path / "store.db"
    questions, db_dir = bench
    env = {"ROLLSCOPE_TEST_KEY": "sk-test-secret-4242"}
    res = rollscope(
        *openai_args(openai_server),
        "--api-key-env", "ROLLSCOPE_TEST_KEY", "--concurrency", "4",
        "--questions", questions, "--db-dir", db_dir, "--samples", "2",
        "--step-budget", "2", "--max-new-tokens", "6", "--store", db, "--quiet",
        env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    policy, checkpoint, spec, info, status = conn.execute(
        "SELECT policy, checkpoint, spec, policy_info, status FROM runs"
    ).fetchone()
    assert status == "completed" and policy == f"openai:{openai_server.base_url}"
    assert checkpoint == openai_server.model  # the pages show the model like a checkpoint
    generation = json.loads(spec)["generation"]
    assert generation["batch_size"] == 4  # the concurrency, as no --batch-size was given
    assert generation["endpoint"]["model"] == openai_server.model
    assert generation["endpoint"]["api_key_env"] == "ROLLSCOPE_TEST_KEY"
    assert json.loads(info)["extra"]["served_model"] == openai_server.model
    pairs = conn.execute("SELECT question_id, sample_index, outcome FROM episodes").fetchall()
    assert len(pairs) == len({(q, s) for q, s, _ in pairs}) == 2 * len(QUESTIONS)
    assert all(outcome is not None for *_, outcome in pairs)
    steps = conn.execute("SELECT tokens_in, tokens_out, truncated FROM steps").fetchall()
    assert len(steps) >= 2 * len(QUESTIONS)
    assert all(t_in > 10 and 1 <= t_out <= 6 for t_in, t_out, _ in steps)
    assert all(bool(cut) == (t_out == 6) for _, t_out, cut in steps)
    conn.close()
    assert b"sk-test-secret-4242" not in db.read_bytes()  # only the variable's name is kept


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be between 1 and 1024, got 0"),
        (["--api-key-env", "not a name"], "--api-key-env must be an environment variable name"),
        (["--request-timeout", "0"], "--request-timeout must be more than 0"),
        (
            ["--api-key-env", "ROLLSCOPE_UNSET_KEY"],
            "ROLLSCOPE_UNSET_KEY (--api-key-env) is not set",
        ),
        (["--model", "gpt-none"], "does not serve model 'gpt-none'"),
    ],
)
def test_bad_server_flags_are_one_line_and_leave_no_run(
    tmp_path: Path,
    bench: tuple[Path, Path],
    openai_server: ServedModel,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    db = tmp_path / "store.db"
    questions, db_dir = bench
    code, err = in_process(
        monkeypatch, capsys, *openai_args(openai_server), *args, "--questions", questions,
        "--db-dir", db_dir, "--store", db, "--quiet",
    )  # fmt: skip
    assert code == 2, err
    assert message in " ".join(err.split()) and len(err.strip().splitlines()) == 1
    if db.exists():  # a flag is refused before the store opens; the server's answer after
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "openai:http://127.0.0.1:9/v1"], "needs the model's name: --model NAME"),
        (["--policy", "oracle", "--model", "m"], "--model applies to the openai policy only"),
        (["--policy", "openai", "--model", "m"], "needs a base url: --policy openai:BASE_URL"),
        (["--policy", "openai:localhost:8000", "--model", "m"], "must look like http://HOST"),
        (["--policy", "openai:http://k:s@127.0.0.1:9/v1", "--model", "m"], "holds credentials"),
        (
            ["--policy", "oracle", "--concurrency", "8"],
            "--concurrency applies to the openai policy",
        ),
    ],
)
def test_misplaced_server_flags_are_refused(
    tmp_path: Path,
    bench: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    questions, db_dir = bench
    code, err = in_process(
        monkeypatch, capsys, "run", *args, "--questions", questions, "--db-dir", db_dir,
        "--store", tmp_path / "store.db", "--quiet",
    )  # fmt: skip
    assert code == 2 and message in " ".join(err.split()), err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("store_there", [False, True], ids=["new store", "existing store"])
def test_no_server_is_one_line_before_any_run(
    tmp_path: Path, bench: tuple[Path, Path], store_there: bool
) -> None:
    db = tmp_path / "store.db"
    if store_there:
        Store(str(db)).close()
    questions, db_dir = bench
    res = rollscope(
        "run", "--policy", f"openai:http://127.0.0.1:{free_port()}/v1", "--model", "m",
        "--retry-deadline", "1", "--questions", questions, "--db-dir", db_dir, "--store", db,
        "--quiet",
    )  # fmt: skip
    assert res.returncode == 2 and "did not answer: connection failed" in res.stderr
    assert "is the server up" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    if store_there:
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    else:  # no empty store left behind for a run that never began
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("store")]


# -- the server dies mid-run --------------------------------------------------------------


@pytest.fixture()
def own_server(served_checkpoint: Path, tmp_path: Path) -> Iterator[ServedModel]:
    """A server this test may kill and start again on the same port."""
    server = ServedModel(served_checkpoint, free_port(), tmp_path / "serve.log")
    server.start()
    yield server
    server.stop()


def _finished(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT COUNT(outcome) FROM episodes").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created or not migrated yet
        return 0


@pytest.mark.slow
def test_server_killed_mid_run_fails_it_and_resume_completes_it(
    tmp_path: Path, bench: tuple[Path, Path], own_server: ServedModel
) -> None:
    db = tmp_path / "store.db"
    questions, db_dir = bench
    samples = 6
    planned = samples * len(QUESTIONS)
    run = subprocess.Popen(
        [
            sys.executable, "-m", "app.cli",
            *map(str, openai_args(own_server)), "--name", "served", "--concurrency", "4",
            "--retry-deadline", "2", "--request-timeout", "10", "--questions", str(questions),
            "--db-dir", str(db_dir), "--samples", str(samples), "--step-budget", "3",
            "--max-new-tokens", "6", "--store", str(db), "--quiet",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while _finished(db) < 4:
        assert run.poll() is None, f"the run ended early: {run.communicate()}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)
    own_server.stop()
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "run failed: PolicyError" in lines[0], err
    assert "did not answer" in lines[0] and "--resume" in lines[0]
    conn = sqlite3.connect(db)
    status, error = conn.execute("SELECT status, error FROM runs").fetchone()
    conn.close()
    assert status == "failed" and "did not answer" in error
    done_before = _finished(db)
    assert 4 <= done_before < planned

    own_server.start()
    res = rollscope("run", "--resume", "served", "--store", db, "--quiet")
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status FROM runs").fetchone() == ("completed",)
    pairs = conn.execute("SELECT question_id, sample_index, outcome FROM episodes").fetchall()
    assert len(pairs) == len({(q, s) for q, s, _ in pairs}) == planned
    assert all(outcome is not None for *_, outcome in pairs)
    orphans = conn.execute(
        "SELECT COUNT(*) FROM steps WHERE episode_id NOT IN (SELECT id FROM episodes)"
    ).fetchone()
    assert orphans == (0,)
    conn.close()
