"""`rollscope fork` and the openai policy: an episode a server played forked with another policy,
an episode forked onto a server (with `run`'s server options), and one continued on its own
server with its own model. The server is a fake that plays a fixed script."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.benchmark import make_benchmark
from tests.support.cli import in_process, rollscope
from tests.support.fake_chat_server import FakeChatServer
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def server() -> Iterator[FakeChatServer]:
    fake = FakeChatServer().start()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, server: FakeChatServer) -> Path:
    """A store holding `srv`, played by the server (DESCRIBE, QUERY, ANSWER 5 on every
    question), then `orc`, played by the oracle."""
    root = tmp_path_factory.mktemp("fork-openai")
    questions, db_dir = make_benchmark(root / "bench")
    store = root / "store.db"
    data = ("--questions", questions, "--db-dir", db_dir, "--store", store, "--quiet")
    res = rollscope(
        "run", "--policy", f"openai:{server.base_url}", "--model", server.model,
        "--concurrency", "4", "--name", "srv", *data,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = rollscope("run", "--policy", "oracle", "--name", "orc", *data)
    assert res.returncode == 0, res.stderr
    return store


def _copy(recorded: Path, folder: Path) -> Path:
    path = folder / "store.db"
    with closing(sqlite3.connect(recorded)) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    return path


def _episode(store: Path, run: str, question: str = "q-france") -> str:
    with closing(sqlite3.connect(store)) as conn:
        ((episode,),) = conn.execute(
            "SELECT e.id FROM episodes e JOIN runs r ON r.id = e.run_id "
            "WHERE r.name = ? AND e.question_id = ?",
            (run, question),
        ).fetchall()
    return str(episode)


def _fork_run(store: Path) -> tuple[str, str | None, dict[str, Any], list[tuple[Any, ...]]]:
    """The fork run's policy, checkpoint and generation settings, and its episodes' steps:
    (step_no, replayed, raw output), in order."""
    with closing(sqlite3.connect(store)) as conn:
        ((run_id, policy, checkpoint, spec),) = conn.execute(
            "SELECT id, policy, checkpoint, spec FROM runs WHERE kind = 'fork'"
        ).fetchall()
        steps = conn.execute(
            "SELECT s.step_no, s.replayed, s.raw_output FROM steps s "
            "JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? ORDER BY s.step_no",
            (run_id,),
        ).fetchall()
    return policy, checkpoint, json.loads(spec)["generation"], steps


def test_a_served_episode_forks_with_another_policy(recorded: Path, tmp_path: Path) -> None:
    store = _copy(recorded, tmp_path)
    episode = _episode(store, "srv")
    res = rollscope("fork", episode, "--step", "2", "--policy", "oracle", "--store", store,
                    "--name", "rescue", "--quiet")  # fmt: skip
    assert res.returncode == 0, res.stderr
    policy, checkpoint, generation, steps = _fork_run(store)
    assert (policy, checkpoint, generation["endpoint"]) == ("oracle", None, None)
    assert steps[0] == (1, 1, "DESCRIBE singer")  # the server's step, replayed
    assert not any(replayed for _, replayed, _ in steps[1:])


def test_an_episode_forks_onto_a_server_with_run_s_server_options(
    recorded: Path, tmp_path: Path, server: FakeChatServer
) -> None:
    store = _copy(recorded, tmp_path)
    episode = _episode(store, "orc")
    asked = len(server.chat_requests)
    res = rollscope(
        "fork", episode, "--step", "2", "--policy", f"openai:{server.base_url}",
        "--model", server.model, "--concurrency", "3", "--request-timeout", "20",
        "--retry-deadline", "5", "--store", store, "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    policy, checkpoint, generation, steps = _fork_run(store)
    assert (policy, checkpoint) == (f"openai:{server.base_url}", server.model)
    endpoint = generation["endpoint"]
    assert endpoint["model"] == server.model and endpoint["concurrency"] == 3
    assert (endpoint["timeout_seconds"], endpoint["retry_seconds"]) == (20.0, 5.0)
    assert generation["batch_size"] == 3  # as `run` sets it: the requests in flight
    assert steps[0][1] == 1 and [r for _, r, _ in steps[1:]] == [0] * (len(steps) - 1)
    assert len(server.chat_requests) > asked  # the server played on from step 2


@pytest.mark.parametrize("policy", [None, "openai:{url}/"], ids=["source's", "same URL"])
def test_a_served_episode_forks_on_its_server_with_its_own_model(
    recorded: Path, tmp_path: Path, server: FakeChatServer, policy: str | None
) -> None:
    store = _copy(recorded, tmp_path)
    episode = _episode(store, "srv")
    chosen = ["--policy", policy.format(url=server.base_url)] if policy else []
    res = rollscope("fork", episode, "--step", "3", *chosen, "--temperature", "0.5",
                    "--store", store, "--quiet")  # fmt: skip
    assert res.returncode == 0, res.stderr
    _, checkpoint, generation, _ = _fork_run(store)
    assert checkpoint == server.model and generation["temperature"] == 0.5
    assert generation["endpoint"]["model"] == server.model
    assert generation["endpoint"]["concurrency"] == generation["batch_size"] == 4  # the source's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "oracle", "--model", "m"], "--model applies to the openai policy only"),
        (["--policy", "random", "--concurrency", "2"], "--concurrency applies to the openai"),
        (["--policy", "openai:http://127.0.0.1:{port}/v1"], "needs the model's name: --model"),
        (["--request-timeout", "0"], "--request-timeout must be more than 0"),
        (["--concurrency", "0"], "--concurrency must be between 1 and 1024, got 0"),
    ],
)
def test_server_options_a_fork_cannot_use_are_one_line(
    recorded: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    store = _copy(recorded, tmp_path)
    episode = _episode(store, "srv")
    args = [a.format(port=free_port()) for a in args]
    code, err = in_process(monkeypatch, capsys, "fork", episode, "--step", "2", *args,
                           "--store", store, "--quiet")  # fmt: skip
    assert code == 2 and message in " ".join(err.split()), err
    assert len(err.strip().splitlines()) == 1
    with closing(sqlite3.connect(store)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (2,)
