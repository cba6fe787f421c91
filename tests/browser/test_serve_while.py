"""`rollscope demo --serve`: the dashboard serves the store while the demo is built into it
(`app.dashboard.serve_while`), and the three processes stop together.

The supervisor tests steer a stand-in job (`serve_while_job.py`) around a real Streamlit; the
last tests run the command itself."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.store import Store
from tests.browser.conftest import REPO, START_TIMEOUT_S, free_port, wait_healthy
from tests.browser.serve_while_job import write_whole
from tests.support.ports import port_closes, port_open

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    """Whether a process exists (a zombie no one reaped counts)."""
    return Path(f"/proc/{pid}").exists()


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _until(check: Callable[[], bool], seconds: float = START_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def _terminal_signals() -> None:
    # SIGINT as a terminal's shell gives it, whatever the suite was started under.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Supervised:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    folder: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def said(self) -> str:
        return self.log.read_text()[-3000:]

    def job_pid(self) -> int:
        started = self.folder / "started"
        assert _until(started.exists), self.said()
        return int(started.read_text())

    def job_signals(self) -> list[str]:
        taken = self.folder / "signals"
        return taken.read_text().split() if taken.exists() else []


@contextmanager
def _started(
    tmp_path: Path, command: list[str] | None = None, *, port: int | None = None
) -> Iterator[Supervised]:
    """The stand-in job (or `command`, `{port}` filled in) under `serve_while`, in a session
    of its own; what is left is killed after the test."""
    store = tmp_path / "s.db"
    Store(str(store)).close()
    port = port or free_port()
    if command is None:
        command = [sys.executable, "-m", "tests.browser.serve_while_job", str(store), "{port}"]
        command.append(str(tmp_path))
    command = [part.replace("{port}", str(port)) for part in command]
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminal_signals,
        )
    try:
        yield Supervised(proc, port, log, tmp_path)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its children end with it
        proc.wait()


def test_the_dashboard_serves_while_the_job_runs_and_after_it(tmp_path: Path) -> None:
    with _started(tmp_path) as run:
        job = run.job_pid()
        wait_healthy(run.url, run.proc, run.log)
        assert _alive(job)  # served before the job ended
        write_whole(tmp_path / "finish", "0")
        assert _until(lambda: not _alive(job)), run.said()  # and reaped
        time.sleep(1)
        assert port_open(run.port) and run.proc.poll() is None
        assert len(_children(run.proc.pid)) == 1  # the dashboard alone
        run.proc.send_signal(signal.SIGINT)  # the terminal's Ctrl-C, once the job is done
        assert run.proc.wait(timeout=20) == 0, run.said()
        assert port_closes(run.port, 5)
        assert run.job_signals() == []


def test_a_job_that_fails_stops_the_dashboard_with_its_code(tmp_path: Path) -> None:
    with _started(tmp_path) as run:
        run.job_pid()
        wait_healthy(run.url, run.proc, run.log)
        write_whole(tmp_path / "finish", "3")
        assert run.proc.wait(timeout=20) == 3, run.said()
        assert port_closes(run.port, 5)


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["Ctrl-C", "SIGTERM"]
)
def test_a_signal_stops_both_and_reaches_the_job_once(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    with _started(tmp_path) as run:
        job = run.job_pid()
        wait_healthy(run.url, run.proc, run.log)
        dashboard = [p for p in _children(run.proc.pid) if p != job]
        # A terminal sends Ctrl-C to its foreground group: the supervisor's, not the children's.
        os.killpg(run.proc.pid, sig)
        assert run.proc.wait(timeout=20) == code, run.said()  # the job's own answer
        assert run.job_signals() == [sig.name]  # one, as the job in the foreground would see
        assert port_closes(run.port, 5)
        assert not any(_alive(p) for p in [job, *dashboard])


def test_a_dashboard_that_cannot_serve_stops_the_job(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with _started(tmp_path, port=port) as run:
            # The job never ends by itself: the command's end (it waits for both) is its stop.
            assert run.proc.wait(timeout=START_TIMEOUT_S) == 1, run.said()
            assert f"Port {port} is not available" in run.said()
            if (tmp_path / "started").exists():  # else it was stopped before it began
                assert not _alive(run.job_pid())
                assert run.job_signals() == ["SIGTERM"]


def test_killing_the_supervisor_ends_both_children(tmp_path: Path) -> None:
    with _started(tmp_path) as run:
        job = run.job_pid()
        wait_healthy(run.url, run.proc, run.log)
        children = _children(run.proc.pid)
        run.proc.kill()
        run.proc.wait()
        assert _until(lambda: not any(_alive(p) for p in children), 20), children
        assert port_closes(run.port, 5)
        assert job in children


def _demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", "demo", "--port", "{port}", "--serve", *args]


def test_make_runs_dashboard_serves_while_the_demo_is_built(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    # A second `make run`: the checkpoints an earlier build trained are in its folder, and
    # this build plays them (the training itself: test_demo_pipeline.py).
    store, work = str(tmp_path / "s.db"), tmp_path / "w"
    for step in (0, 100, 101):
        shutil.copytree(tiny_checkpoint, work / "checkpoints" / f"checkpoint-{step}")
    # One torch thread: the suite runs a test file beside this one on the other core.
    small = ["--steps", "101", "--grpo-steps", "0", "--samples", "1", "--threads", "1"]
    with _started(tmp_path, _demo("--store", store, "--dir", str(work), *small)) as run:
        wait_healthy(run.url, run.proc, run.log)
        assert "demo ready" not in run.said()
        with closing(Store(store, read_only=True)) as st:
            assert len(st.list_runs()) < 7  # the build writes its runs after this
        ready = f"dashboard: {run.url} (Ctrl-C stops it)"  # printed after "demo ready in N s"
        assert _until(lambda: ready in run.said(), 300), run.said()
        assert "demo ready in" in run.said().split(ready)[0].splitlines()[-1]
        assert f"reusing checkpoints in {work / 'checkpoints'}" in run.said()
        time.sleep(1)
        assert port_open(run.port) and len(_children(run.proc.pid)) == 1
        with closing(Store(store, read_only=True)) as st:
            assert {r.status for r in st.list_runs()} == {"completed"}
        run.proc.send_signal(signal.SIGINT)
        assert run.proc.wait(timeout=20) == 0, run.said()
        assert port_closes(run.port, 5)


def test_a_demo_build_that_fails_stops_its_dashboard(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    store = str(tmp_path / "s.db")
    with _started(tmp_path, _demo("--store", store, "--dir", str(tmp_path / "a-file"))) as run:
        assert run.proc.wait(timeout=START_TIMEOUT_S) == 2, run.said()
        assert "error: Not a directory" in run.said()
        assert port_closes(run.port, 5)
