"""`rollscope env-server --workers N`: several processes serve one run over one listening
socket and one sample numbering; a worker that dies stops the server, and a server killed
outright takes its workers with it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from openenv.core.generic_client import GenericEnvClient

from app.env_server.served import SampleNumbers
from storage.store import Store
from tests.app.env_server.conftest import Bench, ServerProcess, alive, wait_for
from tests.app.env_server.test_env_sessions import episodes, play


def _take(numbers: SampleNumbers, count: int, out: Any) -> None:
    for i in range(count):
        out[i] = numbers.take("q-count")


def test_sample_numbers_are_shared_by_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    # A spawned process first runs its parent's __main__; in a test worker that may be a
    # script an earlier test ran (the dashboard's), so the children get an empty one.
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    numbers = SampleNumbers(["q-count", "q-france"], {"q-count": 3})
    context = multiprocessing.get_context("spawn")
    taken = [context.Array("q", 200) for _ in range(2)]
    workers = [context.Process(target=_take, args=(numbers, 200, out)) for out in taken]
    for worker in workers:
        worker.start()
    mine = [numbers.take("q-count") for _ in range(50)]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    every = [*mine, *taken[0][:], *taken[1][:]]
    assert sorted(every) == list(range(3, 453)), "each index given once, none skipped"
    assert numbers.take("q-france") == 0


def two_workers(start_process: type[ServerProcess], bench: Bench, store: Path) -> ServerProcess:
    """`rollscope env-server --workers 2`, once both workers serve."""
    server = start_process(
        ["--name", "env", "--questions", str(bench.questions), "--db-dir", str(bench.db_dir),
         "--store", str(store), "--step-budget", "5", "--workers", "2"]
    )  # fmt: skip
    server.wait_serving(timeout=180)  # each worker imports the app anew: slow on a busy machine
    wait_for(lambda: len(server.workers()) == 2)
    return server


def test_two_workers_serve_one_run(
    tmp_path: Path, bench: Bench, start_process: type[ServerProcess]
) -> None:
    server = two_workers(start_process, bench, tmp_path / "store.db")
    url = server.url
    assert "64 sessions at most by each of 2 workers" in server.output()
    workers = server.workers()
    rewards: list[float] = []

    def client() -> None:
        with GenericEnvClient(base_url=url).sync() as env:
            rewards.extend(play(env, "q-count").reward for _ in range(3))

    clients = [threading.Thread(target=client) for _ in range(8)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(120)
    assert rewards == [1.0] * 24
    left = GenericEnvClient(base_url=url).sync()
    left.reset(question_id="q-france")
    assert server.stop(signal.SIGINT) == 0
    assert "stopped: run 'env' is completed with 25 episodes" in server.output()
    assert not any(alive(pid) for pid in workers)

    store = Store(str(tmp_path / "store.db"))
    run = store.find_run("env")
    assert run is not None and run.status == "completed"
    found = episodes(store, run.id)
    counted = [e.summary.sample_index for e in found if e.summary.question_id == "q-count"]
    assert sorted(counted) == list(range(24)), "one numbering across the workers"
    assert all(len(e.steps) == 3 for e in found if e.summary.outcome == "correct")
    assert [e.summary.outcome for e in found if e.summary.question_id == "q-france"] == [
        "abandoned"
    ]
    store.close()
    left.close()


def test_a_worker_that_dies_stops_the_server(
    tmp_path: Path, bench: Bench, start_process: type[ServerProcess]
) -> None:
    server = two_workers(start_process, bench, tmp_path / "store.db")
    first, second = server.workers()
    os.kill(first, signal.SIGKILL)
    assert server.proc.wait(60) == 2
    assert "was killed (signal 9); the other workers were stopped" in server.output()
    assert not alive(second)
    store = Store(str(tmp_path / "store.db"))
    run = store.find_run("env")
    assert run is not None and run.status != "completed", "left to be taken up again"
    store.close()


def test_workers_stop_when_their_server_is_killed(
    tmp_path: Path, bench: Bench, start_process: type[ServerProcess]
) -> None:
    server = two_workers(start_process, bench, tmp_path / "store.db")
    workers = server.workers()
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers), "no orphan worker serves on"
