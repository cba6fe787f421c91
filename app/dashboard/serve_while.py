"""Serve the dashboard while a job writes its store (`rollscope demo --serve`).

The demo's build writes each run as it plays it, and the dashboard shows a run as it begins
and follows a live one, so the first `make run` opens the dashboard at once rather than after
the minutes the build takes. This process only waits on two children: one runs the job (its
torch is freed when it ends), one becomes Streamlit (`serve.serve`).

Both children lead process groups of their own and end with this process
(`serve.end_with_parent`): a Ctrl-C in the terminal or a SIGTERM reaches this process alone,
which passes it on once, to each child that still runs (Streamlit always gets SIGTERM). So the
job sees one Ctrl-C, as it would in the foreground, and a second one still stops it at once.
A job that fails stops the dashboard (there is nothing more to show it), and a dashboard that
cannot serve (its port taken) stops the job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from app.dashboard.serve import end_with_parent, serve


def _exit_code(status: int) -> int:
    """A wait status as a shell shows it: 128 + the signal for a process a signal ended."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _signal(pid: int, signum: int) -> None:
    # A signal can land between a child's reaping and its leaving `live`.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _start(target: Callable[[], int]) -> int:
    """Run `target` in a child process; the child exits with what it returns."""
    sys.stdout.flush()  # or the child writes what this process had buffered a second time
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setpgrp()  # the terminal's Ctrl-C goes to the parent, which passes it on
        end_with_parent()
        code = target()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve_while(
    job: Callable[[], int],
    *,
    store_url: str,
    port: int,
    checkpoint_roots: Sequence[Path] = (),
) -> int:
    """Serve the dashboard on `store_url` while `job()` runs in a process of its own, and
    after it, until stopped. Returns this command's exit code: the job's where it failed or
    was stopped, else the dashboard's."""

    def dashboard_process() -> int:
        serve(store_url, port=port, checkpoint_roots=checkpoint_roots)  # execs Streamlit

    dashboard = _start(dashboard_process)
    worker = _start(job)
    live = {dashboard, worker}
    stopped_job = False  # this process passed a signal on to the job

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopped_job
        if worker in live:
            stopped_job = True
            _signal(worker, signum)
        if dashboard in live:
            _signal(dashboard, signal.SIGTERM)

    taken = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: a script's `... &`
        taken.append(signal.SIGINT)
    previous = {s: signal.signal(s, pass_on) for s in taken}
    codes: dict[int, int] = {}
    ended_first: int | None = None  # the code of a child that ended on its own, too early
    try:
        while live:
            pid, status = os.wait()
            if pid not in live:
                continue
            live.discard(pid)
            codes[pid] = code = _exit_code(status)
            if stopped_job or ended_first is not None:
                continue
            if pid == worker and code != 0:
                ended_first = code
                _signal(dashboard, signal.SIGTERM)
            elif pid == dashboard and worker in live:
                ended_first = code or 1
                _signal(worker, signal.SIGTERM)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stopped_job:
        return codes[worker]  # how the job took being stopped: 130 after a Ctrl-C
    return ended_first if ended_first is not None else codes[dashboard]
