"""Start and stop worker processes that execute queued runs (`rollscope run --run-id ID`)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from storage import lifecycle
from storage.store import Store

# Workers this process started, by run id. Polling them reaps finished ones, which would
# otherwise stay zombies that still answer kill(pid, 0) and look alive.
_workers: dict[int, subprocess.Popen[bytes]] = {}


def worker_command(store_url: str, run_id: int) -> list[str]:
    """The command line of the worker for one run."""
    return [sys.executable, "-m", "app.cli", "run", "--run-id", str(run_id), "--store", store_url]


def worker_log_path(run_id: int, log_dir: Path | None = None) -> Path:
    """Where the worker of a run writes its output."""
    base = log_dir if log_dir is not None else Path(tempfile.gettempdir()) / "rollscope-workers"
    return base / f"run-{run_id}.log"


def start_worker(
    store_url: str, run_id: int, *, log_dir: Path | None = None, extra: Sequence[str] = ()
) -> int:
    """Start the worker of a queued run in its own session; returns its pid. `extra`: more
    `rollscope run` flags (where to play it, e.g. the Ray fan-out's)."""
    log_path = worker_log_path(run_id, log_dir)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [*worker_command(store_url, run_id), *extra],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: stopping the dashboard (Ctrl-C) must not kill running batches.
            start_new_session=True,
        )
    _workers[run_id] = proc
    return proc.pid


def worker_running(run_id: int) -> bool:
    """Whether a worker this process started for the run is still alive."""
    proc = _workers.get(run_id)
    return proc is not None and proc.poll() is None


def worker_exit_code(run_id: int) -> int | None:
    """Exit code of the worker this process started for the run; None while it runs or if none."""
    proc = _workers.get(run_id)
    return None if proc is None else proc.poll()


def cancel_run(store: Store, run_id: int) -> None:
    """Stop a run: SIGTERM its worker when it runs here, else mark it cancelled in the store.

    A worker finishes its current iteration on SIGTERM and marks the run cancelled itself; a
    worker elsewhere polls the run's status and stops when it reads `cancelled`.
    """
    run = store.get_run(run_id)
    if run is None:
        raise lifecycle.RunStateError(f"no run with id {run_id}; list runs with `rollscope runs`")
    if lifecycle.cancel_refusal(run.name, run.status) is not None:
        return  # already over: nothing to stop
    pid = _local_worker_pid(run_id, run.pid, run.host)
    if pid is None:
        store.set_run_status(run_id, "cancelled", error="cancelled from the dashboard")
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        store.set_run_status(run_id, "cancelled", error="cancelled from the dashboard")


def _local_worker_pid(run_id: int, pid: int | None, host: str | None) -> int | None:
    """The pid of the run's live worker on this host, if one is known."""
    proc = _workers.get(run_id)
    if proc is not None:
        return proc.pid if proc.poll() is None else None
    # The store records the pid of the process that created the run: for a queued run that is
    # the dashboard itself (never signal it), for `rollscope run` it is the worker.
    if pid is None or pid == os.getpid() or host != socket.gethostname():
        return None
    return pid if _is_rollscope_process(pid) else None


def _is_rollscope_process(pid: int) -> bool:
    """Whether a live pid runs `rollscope run` / `python -m app.cli run` (not a recycled pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(
        (a == b"app.cli" or a.endswith(b"rollscope")) and b == b"run"
        for a, b in itertools.pairwise(argv)
    )
