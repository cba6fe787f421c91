"""`rollscope env-server` as a user meets it: a real process that is killed and started again
on the same store, and bad flags, ports and stores refused in one line before any run exists."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient

from app.cli import main
from rollout_core.records import RunSpec
from storage.store import Store
from tests.app.env_server.conftest import Bench, ServerProcess, env_spec
from tests.app.env_server.test_env_sessions import ORACLE, episodes, play
from tests.support.plain_sql import sql_rows
from tests.support.records import spec


def test_a_killed_server_started_again_goes_on_with_the_same_run(
    tmp_path: Path, bench: Bench, start_process: type[ServerProcess]
) -> None:
    store_path = tmp_path / "store.db"
    args = ["--name", "env", "--questions", str(bench.questions), "--db-dir", str(bench.db_dir),
            "--store", str(store_path), "--step-budget", "5",
            "--evaluation-of", "grpo"]  # fmt: skip
    first = start_process(args)
    url = first.wait_serving()
    assert f"serving run 'env' (dataset {bench.questions}, store {store_path}) at " in (
        first.output()
    )
    with GenericEnvClient(base_url=url).sync() as env:
        assert play(env, "q-count").reward == 1.0
    left = GenericEnvClient(base_url=url).sync()
    left.reset(question_id="q-count")
    left.step(ORACLE["q-count"][0])
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    store = Store(str(store_path))
    run = store.find_run("env")
    assert run is not None and run.status == "interrupted"

    second = start_process(args)
    url = second.wait_serving()
    assert "1 unfinished episode marked abandoned" in second.output()
    with GenericEnvClient(base_url=url).sync() as env:
        assert play(env, "q-count").observation["metadata"]["outcome"] == "correct"
    assert second.stop(signal.SIGINT) == 0
    assert "stopped: run 'env' is completed with 3 episodes" in second.output()

    run = store.find_run("env")
    assert run is not None and run.status == "completed" and run.episodes_finished == 3
    assert RunSpec.from_stored(run.spec).evaluation_of == "grpo"  # the Training pages' link
    found = sorted(episodes(store, run.id), key=lambda e: e.summary.sample_index)
    assert [(e.summary.sample_index, e.summary.outcome, len(e.steps)) for e in found] == [
        (0, "correct", 3),
        (1, "abandoned", 1),
        (2, "correct", 3),
    ]
    # Nobody saw the abandoned one end: its duration and end are unknown, the others' measured.
    timed = [e.summary.duration_seconds for e in found]
    assert timed[1] is None and timed[0] and timed[2]
    times = sql_rows(
        f"sqlite:///{store_path}",
        f"SELECT started_at IS NOT NULL, ended_at IS NOT NULL FROM episodes "
        f"WHERE run_id = {run.id} ORDER BY sample_index",
    )
    assert times == [(1, 1), (1, 0), (1, 1)]
    store.close()
    left.close()


def rollscope(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["rollscope", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    return int(stopped.value.code or 0)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def test_bad_flags_are_refused_in_one_line_before_any_store(
    tmp_path: Path,
    bench: Bench,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = str(tmp_path / "store.db")
    base = ["env-server", "--name", "env", "--store", store]
    data = ["--questions", str(bench.questions), "--db-dir", str(bench.db_dir)]
    cases = [
        ([*data, "--host", "0.0.0.0", "--port", "0"], "pass --allow-remote with a --token"),
        ([*data, "--host", "0.0.0.0", "--allow-remote"], "--allow-remote needs a --token"),
        # Not "reachable from other machines": it names nothing to listen on.
        ([*data, "--host", "no-such-host.invalid"], "cannot listen on no-such-host.invalid:"),
        ([*data, "--max-sessions", "0"], "--max-sessions must be at least 1"),
        ([*data, "--workers", "0"], "--workers must be between 1 and 64"),
        ([*data, "--step-budget", "0"], "step_budget must be at least 1"),
        (["--questions", str(tmp_path / "none.json")], "questions file not found"),
        (["--dataset", "demo", *data], "not both"),
        (["--dataset", "d" * 300], "File name too long"),  # the system's error, not a traceback
        # The server failed to start, in a traceback, where it encodes the header it expects.
        ([*data, "--token", "t\udcffk"], "--token must be ASCII letters, digits and punctuation"),
        ([*data, "--token", "two words"], "--token must be ASCII letters, digits and punctuation"),
        ([*data, "--evaluation-of", " "], "--evaluation-of: the run name is empty"),
    ]
    for flags, message in cases:
        assert rollscope(monkeypatch, *base, *flags) == 2, flags
        assert message in one_error_line(capsys), flags
    monkeypatch.setenv("ROLLSCOPE_ENV_TOKEN", "")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert rollscope(monkeypatch, *base, *data, "--port", port) == 2
        assert f"port {port} on 127.0.0.1 is in use" in one_error_line(capsys)
    assert not Path(store).exists(), "nothing is written before the server can serve"


def test_a_name_taken_by_another_run_or_other_settings_is_refused(
    tmp_path: Path,
    bench: Bench,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    store.create_run(spec("batch-run"), episodes_planned=1)
    served = store.create_run(env_spec(bench, "served", step_budget=5), episodes_planned=0)
    store.set_run_status(served, "failed", error="killed")
    base = ["env-server", "--store", url, "--port", "0", "--questions", str(bench.questions),
            "--db-dir", str(bench.db_dir)]  # fmt: skip
    assert rollscope(monkeypatch, *base, "--name", "batch-run") == 2
    assert "a batch run named 'batch-run' already exists" in one_error_line(capsys)
    assert rollscope(monkeypatch, *base, "--name", "served", "--step-budget", "9") == 2
    assert "start it with the same --dataset/--questions and --step-budget" in one_error_line(
        capsys
    )
    (tmp_path / "not-a-store.db").write_text("hello")
    bad = ["env-server", "--name", "x", "--store", str(tmp_path / "not-a-store.db"), "--port", "0"]
    assert rollscope(monkeypatch, *bad) == 2
    assert "not-a-store.db" in one_error_line(capsys)
    store.close()


def test_stopping_the_server_while_sessions_play_is_quiet(
    tmp_path: Path, bench: Bench, start_process: type[ServerProcess]
) -> None:
    """The server closes the sessions still playing as it stops; OpenEnv's handler, answering
    on their closed sockets, was logged as the application's error, a traceback a session."""
    import threading

    store_path = tmp_path / "store.db"
    args = ["--name", "busy", "--questions", str(bench.questions), "--db-dir", str(bench.db_dir),
            "--store", str(store_path), "--step-budget", "5"]  # fmt: skip
    server = start_process(args)
    url = server.wait_serving()
    stop = threading.Event()
    playing = threading.Barrier(4)

    def keep_playing() -> None:
        try:
            with GenericEnvClient(base_url=url).sync() as env:
                play(env, "q-count")
                playing.wait(30)
                while not stop.is_set():
                    env.reset(question_id="q-count")
                    env.step(ORACLE["q-count"][0])
        except Exception:  # the server stopped under it: what this test is about
            pass

    clients = [threading.Thread(target=keep_playing) for _ in range(3)]
    for client in clients:
        client.start()
    playing.wait(60)  # every client has played a whole episode and is playing on
    assert server.stop(signal.SIGTERM) == 0
    stop.set()
    for client in clients:
        client.join(60)
    assert "Exception in ASGI application" not in server.output()
    assert "Traceback" not in server.output()
    assert "stopped: run 'busy' is completed" in server.output()
