"""Serving the run: in this process, or in worker processes that share its listening socket.

One process serves its sessions' steps on one core (the interpreter lock). With `workers`, each
worker serves the run the same way, with its own writer and sandbox, over the one numbering;
the kernel hands each new connection to one of them. The parent keeps the run's heartbeat,
stops the workers on Ctrl-C or SIGTERM and marks the run completed once they are all done.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from app.batch import JobError
from app.env_server.served import OpenRun, SampleNumbers, ServedRun
from rollout_core.datasets import Dataset
from rollout_core.records import RunSpec
from storage.store import Store

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WORKER_STOP_SECONDS = 30
"""How long a stopping worker may take to close its sessions before it is killed."""


def serve_sessions(
    served: ServedRun,
    listener: socket.socket,
    *,
    max_sessions: int,
    token: str | None,
    ready: Callable[[], None],
) -> None:
    """Serve `served`'s sessions in this process until Ctrl-C or SIGTERM, calling `ready` once
    it can take them; the sessions still open are closed on the way out."""
    try:
        from app.env_server.asgi import build_app

        app = build_app(served, max_sessions=max_sessions, token=token)
        ready()
        _uvicorn(app, listener)
    finally:
        served.close()


def serve_in_workers(
    run: OpenRun,
    listener: socket.socket,
    workers: int,
    *,
    max_sessions: int,
    token: str | None,
    ready: Callable[[], None],
) -> None:
    """Serve `run` from `workers` processes until Ctrl-C or SIGTERM, calling `ready` once they
    all can take sessions; JobError when one of them stopped on its own (the others are
    stopped, the run left to be taken up again)."""
    context = multiprocessing.get_context("spawn")
    job = WorkerJob(
        run.store.url, run.run_id, run.spec, run.dataset, run.numbers, max_sessions, token
    )
    started = [context.Event() for _ in range(workers)]
    processes = [
        context.Process(
            target=_worker, args=(job, listener, up), name=f"rollscope-env-worker-{i + 1}"
        )
        for i, up in enumerate(started)
    ]
    stopping = threading.Event()

    def stop(*_: object) -> None:
        stopping.set()
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        for process in processes:
            process.start()
        failed = _wait_until_ready(processes, started, stopping)
        if failed is None and not stopping.is_set():
            ready()
            failed = _wait_for_first_exit(processes, stopping)
        if failed is not None:
            stop()
        for process in processes:
            process.join(WORKER_STOP_SECONDS)
            if process.exitcode is None:
                process.kill()
                process.join()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if failed is not None:
        code = failed.exitcode or 0
        how = f"was killed (signal {-code})" if code < 0 else f"stopped (exit code {code})"
        raise JobError(
            f"{failed.name} {how}; the other workers were stopped and the run left unfinished: "
            "start the server again to go on with it"
        )


def _wait_until_ready(
    processes: Sequence[multiprocessing.process.BaseProcess],
    started: Sequence[Any],
    stopping: threading.Event,
) -> multiprocessing.process.BaseProcess | None:
    """Block until every worker serves, one exits (returned) or the server is told to stop."""
    while not all(up.is_set() for up in started) and not stopping.is_set():
        wait([p.sentinel for p in processes], timeout=0.1)
        ended = [p for p in processes if p.exitcode is not None]
        if ended:
            return ended[0]
    return None


def _wait_for_first_exit(
    processes: Sequence[multiprocessing.process.BaseProcess], stopping: threading.Event
) -> multiprocessing.process.BaseProcess | None:
    """Block until a worker exits: None when the server was told to stop, else that worker."""
    while True:
        wait([p.sentinel for p in processes])
        if stopping.is_set():
            return None
        ended = [p for p in processes if p.exitcode is not None]
        if ended:
            return ended[0]


@dataclass(frozen=True)
class WorkerJob:
    """What a worker process needs to serve the run (sent to it pickled)."""

    store_url: str
    run_id: int
    spec: RunSpec
    dataset: Dataset
    numbers: SampleNumbers
    max_sessions: int
    token: str | None


def _worker(job: WorkerJob, listener: socket.socket, started: Any) -> None:
    # Out of the terminal's process group: Ctrl-C reaches the parent alone, which stops each
    # worker with one SIGTERM (a SIGINT besides, landing after it, makes uvicorn drop its
    # sessions unclosed).
    os.setpgrp()
    _stop_with_parent()
    store = Store(job.store_url)
    served = ServedRun(store, job.run_id, job.spec, job.dataset, job.numbers)
    try:
        serve_sessions(
            served, listener, max_sessions=job.max_sessions, token=job.token, ready=started.set
        )
    finally:
        store.close()


def _stop_with_parent() -> None:
    """SIGTERM this worker when its parent is gone (killed, say): no orphan serves on."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="rollscope-parent-watch", daemon=True).start()


def _uvicorn(app: Any, listener: socket.socket) -> None:
    """Serve until Ctrl-C or SIGTERM. uvicorn shuts down gracefully on either, then raises the
    signal again for the handler it found: this one, so that the run is closed after it."""
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=10,
        # Messages are small JSON on a near link: compressing each costs both ends more CPU
        # than the bytes it saves.
        ws_per_message_deflate=False,
    )
    previous = {s: signal.signal(s, lambda *_: None) for s in STOP_SIGNALS}
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
