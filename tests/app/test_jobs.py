"""Worker processes of the dashboard's Launch: started, cancelled, their command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app import jobs
from app.dashboard.launch import form as launch
from storage.store import Store
from tests.app.dashboard.launch.test_launch_form import _request


def test_cancel_marks_a_queued_run_without_signalling_this_process(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run_id = launch.queue_run(store, _request(run_name="queued"), ())
    # The store recorded this (creating) process's pid: cancelling must not signal it.
    jobs.cancel_run(store, run_id)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    jobs.cancel_run(store, run_id)  # already over: nothing to do
    with pytest.raises(ValueError, match="no run with id 999"):
        jobs.cancel_run(store, 999)


def test_cancel_sends_sigterm_to_the_worker_this_process_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "s.db"))
    run_id = launch.queue_run(store, _request(run_name="live"), ())
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(jobs, "worker_command", lambda url, rid: sleeper)
    pid = jobs.start_worker(store.url, run_id, log_dir=tmp_path)
    assert jobs.worker_running(run_id) and pid != os.getpid()
    jobs.cancel_run(store, run_id)
    proc = jobs._workers[run_id]
    assert proc.wait(timeout=10) == -15
    assert (tmp_path / f"run-{run_id}.log").is_file()
    # The worker is gone before it could mark the run: the next cancel does it.
    jobs.cancel_run(store, run_id)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"


def test_worker_command_runs_the_cli() -> None:
    assert jobs.worker_command("x.db", 3) == [
        sys.executable,
        "-m",
        "app.cli",
        "run",
        "--run-id",
        "3",
        "--store",
        "x.db",
    ]
