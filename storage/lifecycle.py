"""A run's life in one place: its statuses, the moves between them, and whether it is alive.

    queued ──> running ──> completed
       │          ├──────> failed ──────┐
       │          ├──────> cancelled ───┼──> running   (resume)
       │          └──────> interrupted ─┘
       └──> cancelled | failed

`interrupted` is never written: a `running` run whose process is gone reads `interrupted`. On
the host that runs it the pid answers at once; elsewhere only the heartbeat tells, so a run on
another machine reads `interrupted` once its heartbeat is older than HEARTBEAT_STALE_SECONDS.
An import run also moves completed -> running: its source grows (a trainer writes more files)
and `rollscope import` reads on.
The CLI, the Launch worker and the dashboard all ask this module; none decides on its own.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from rollout_core.errors import RollscopeError
from rollout_core.records import RunKind, RunStatus

HEARTBEAT_STALE_SECONDS = 90.0
"""A heartbeat older than this means the run's process is gone (it beats every 10 s)."""

ACTIVE: frozenset[RunStatus] = frozenset({"queued", "running"})
TERMINAL: frozenset[RunStatus] = frozenset({"completed", "failed", "cancelled", "interrupted"})
RESUMABLE: frozenset[RunStatus] = frozenset({"failed", "cancelled", "interrupted"})

_MOVES: dict[RunStatus, frozenset[RunStatus]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"completed", "failed", "cancelled"}),
    # A cancel that arrives as the last iteration finishes: the run did complete.
    "cancelled": frozenset({"running", "completed"}),
    "failed": frozenset({"running"}),
    "interrupted": frozenset({"running", "cancelled", "failed"}),
    "completed": frozenset(),
}


class RunStateError(RollscopeError, ValueError):
    """A run cannot make the move asked of it; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class RunPresence:
    """What the store knows about the process playing a run."""

    status: RunStatus
    """As stored."""
    host: str | None
    pid: int | None
    heartbeat_at: datetime | None


REOPENING_KINDS: frozenset[RunKind] = frozenset({"import"})
"""Runs a completed run of which goes on: its source grows."""


def can_move(current: RunStatus, new: RunStatus, kind: RunKind = "batch") -> bool:
    """Whether a run (of `kind`) may go from `current` (its effective status) to `new`."""
    if current == "completed" and new == "running" and kind in REOPENING_KINDS:
        return True
    return (new == current and new in TERMINAL) or new in _MOVES[current]


def check_move(
    name: str,
    current: RunStatus,
    new: RunStatus,
    kind: RunKind = "batch",
    player: RunPresence | None = None,
) -> None:
    """RunStateError naming the run when the move is not allowed (`player`: the process the
    store says plays it, named when it is running already)."""
    if can_move(current, new, kind):
        return
    if new == "running" and current == "completed":
        raise RunStateError(f"run {name!r} is already completed")
    if new == "running" and current == "running":
        where = ""
        if player is not None and player.pid is not None:
            where = f" (process {player.pid} on {player.host or 'another machine'})"
        raise RunStateError(
            f"run {name!r} is already running{where}; wait for it to end or stop it, then try again"
        )
    raise RunStateError(f"run {name!r} is {current}; it cannot become {new}")


def effective_status(run: RunPresence, now: datetime) -> RunStatus:
    """The stored status, except that a `running` run whose process is gone is `interrupted`."""
    if run.status != "running":
        return run.status
    alive = process_alive(run.host, run.pid)
    if alive is not None:
        return "running" if alive else "interrupted"
    if run.heartbeat_at is None:
        return "running"
    stale = now - run.heartbeat_at > timedelta(seconds=HEARTBEAT_STALE_SECONDS)
    return "interrupted" if stale else "running"


def process_alive(host: str | None, pid: int | None) -> bool | None:
    """Whether the pid lives on this host; None when it cannot be told from here."""
    if host != socket.gethostname() or pid is None:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return not _is_zombie(pid)


def resume_refusal(name: str, status: RunStatus) -> str | None:
    """Why a run (at its effective status) cannot be resumed; None when it can."""
    if status in RESUMABLE:
        return None
    if status == "completed":
        return f"run {name!r} is already completed"
    if status == "queued":
        return f"run {name!r} is queued, not started: play it with --run-id"
    return (
        f"run {name!r} is still running; stop it first (Ctrl-C, or Cancel in the dashboard), "
        "or resume it once it reads interrupted"
    )


def cancel_refusal(name: str, status: RunStatus) -> str | None:
    """Why a run cannot be cancelled; None when it can (a finished run needs no cancel)."""
    if status in ACTIVE:
        return None
    return f"run {name!r} is {status}; only queued or running runs can be cancelled"


def this_process() -> tuple[str, int]:
    """(host, pid) recorded for the process that plays a run."""
    return socket.gethostname(), os.getpid()


def _is_zombie(pid: int) -> bool:
    """A dead child not yet reaped still answers kill(pid, 0); /proc tells it apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself hold spaces.
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
