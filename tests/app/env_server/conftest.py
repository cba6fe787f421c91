"""The environment server in this process, on a loopback port, over a real store and the
fixture benchmark; and the same as a `rollscope env-server` process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("openenv")

import uvicorn

from app.env_server.asgi import build_app
from app.env_server.served import ServedRun, open_run
from rollout_core.datasets import load_dataset
from rollout_core.records import RunSpec
from rollout_core.settings import EnvironmentSettings
from storage.store import Store
from tests.conftest import REPO
from tests.support.benchmark import make_benchmark


@dataclass
class Served:
    """A server running in this process: its URL, its store and its run."""

    url: str
    store: Store
    run: ServedRun

    @property
    def run_id(self) -> int:
        return self.run.run_id


@dataclass(frozen=True)
class Bench:
    questions: Path
    db_dir: Path


@pytest.fixture
def bench(tmp_path: Path) -> Bench:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    return Bench(questions, db_dir)


def env_spec(bench: Bench, name: str = "env", step_budget: int = 5) -> RunSpec:
    return RunSpec(
        name=name,
        policy="env-server",
        dataset=str(bench.questions),
        questions_path=str(bench.questions),
        db_dir=str(bench.db_dir),
        environment=EnvironmentSettings(step_budget=step_budget),
        kind="env",
    )


@contextmanager
def serving(
    store: Store, spec: RunSpec, *, max_sessions: int = 64, token: str | None = None
) -> Iterator[Served]:
    """The server on a free loopback port until the block ends, then stopped as Ctrl-C would."""
    dataset = load_dataset(spec.questions_path, spec.db_dir)
    run = open_run(store, spec, dataset)
    served = run.served()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    port = listener.getsockname()[1]
    app = build_app(served, max_sessions=max_sessions, token=token)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the in-process env server did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", store, served)
    finally:
        server.should_exit = True
        thread.join(20)
        listener.close()
        served.close()
        run.complete()


@pytest.fixture
def served(tmp_path: Path, bench: Bench) -> Iterator[Served]:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with serving(store, env_spec(bench)) as running:
        yield running
    store.close()


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll `check` until it holds (a server finishing a session after its client left)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


class ServerProcess:
    """`rollscope env-server` as a process; `url` once it says where it listens."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "env-server", "--port", "0", *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        self.url = ""

    def wait_serving(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"at (http://127\.0\.0\.1:\d+)", self.log.read_text())
            if found:
                self.url = found.group(1)
                return self.url
            if self.proc.poll() is not None:
                raise AssertionError(f"env-server exited: {self.log.read_text()}")
            time.sleep(0.1)
        raise AssertionError(f"env-server did not start: {self.log.read_text()}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._out.close()
        return code

    def output(self) -> str:
        return self.log.read_text()

    def workers(self) -> list[int]:
        """The pids of the server's worker processes (multiprocessing's spawned children)."""
        pid = self.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [int(c) for c in children if b"spawn_main" in _cmdline(int(c))]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
def start_process(tmp_path: Path) -> Iterator[Callable[[list[str]], ServerProcess]]:
    started: list[ServerProcess] = []

    def start(args: list[str]) -> ServerProcess:
        proc = ServerProcess(args, tmp_path / f"server-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(10)
