"""Stopping a long job cleanly: Ctrl-C and SIGTERM ask it to stop at its next safe point."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNAL_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


@contextmanager
def stop_on_signals(flag: threading.Event) -> Iterator[list[str]]:
    """While inside, SIGINT (Ctrl-C) and SIGTERM (a job scheduler's stop) set `flag`, which the
    job reads between two writes; a second Ctrl-C raises KeyboardInterrupt at once. Yields the
    names of the signals taken, in order.

    A KeyboardInterrupt raised wherever the signal lands can cut a store's write or commit in
    two, leaving a pooled connection in a transaction that locks out the run's last status.
    Outside the main thread, where no handler can be set, it does nothing.
    """
    taken: list[str] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        taken.append(SIGNAL_NAMES.get(signum, f"signal {signum}"))
        if flag.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        flag.set()

    if threading.current_thread() is not threading.main_thread():
        yield taken
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield taken
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
