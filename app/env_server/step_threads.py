"""The threads the server plays its sessions' steps on: one lane, and spares for slow steps.

Steps run off the event loop, so a slow query never holds up the WebSocket traffic. Played on
a pool of threads at once, they cost much more CPU than played one after another on one thread
(each step handed between threads, which contend for the GIL), so every step goes to one lane
thread. A step that has held the lane longer than `stuck_after` (a slow query, up to the
sandbox's deadline; a first gold query on a large database) would hold up every session behind
it: while it runs, spare threads play the steps waiting. A watcher thread looks at the lane
`stuck_after` apart and wakes them; no step pays for the watching.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

STUCK_AFTER_SECONDS = 0.05
"""A step that has held the lane this long is slow: the spares play the steps waiting."""

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class StepThreads(Executor):
    """One lane thread that plays steps in order, and `spares` threads for when it is stuck."""

    def __init__(self, spares: int, *, stuck_after: float = STUCK_AFTER_SECONDS) -> None:
        self.stuck_after = stuck_after
        self._pending: deque[_Item] = deque()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        """The lane waits here for steps."""
        self._spill = threading.Condition(self._lock)
        """The spares wait here for the watcher to find the lane stuck."""
        self._lane_began: float | None = None
        """When the lane's step in play began; None while it waits."""
        self._closed = False
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._lane, name="env-step", daemon=True),
            threading.Thread(target=self._watch, name="env-step-watch", daemon=True),
        ]
        self._threads += [
            threading.Thread(target=self._spare, name=f"env-step-spare-{i}", daemon=True)
            for i in range(spares)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is stopping: no more steps are played")
            self._pending.append((done, fn, args, kwargs))
            self._work.notify()
        return done

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more steps; the ones waiting are played (or cancelled), then the threads end."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while self._pending:
                    self._pending.popleft()[0].cancel()
            self._work.notify_all()
            self._spill.notify_all()
        self._stopping.set()
        if wait:
            for thread in self._threads:
                thread.join()

    def _lane(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._work.wait()
                if not self._pending:
                    return
                item = self._pending.popleft()
                self._lane_began = time.monotonic()
            _play(item)
            with self._lock:
                self._lane_began = None

    def _watch(self) -> None:
        while True:
            self._stopping.wait(self.stuck_after)
            with self._lock:
                if self._closed:
                    return
                if self._pending and self._stuck():
                    self._spill.notify(len(self._pending))

    def _spare(self) -> None:
        while True:
            with self._lock:
                while not (self._pending and self._stuck()):
                    if self._closed:
                        return
                    self._spill.wait()
                item = self._pending.popleft()
            _play(item)

    def _stuck(self) -> bool:
        began = self._lane_began
        return began is not None and time.monotonic() - began > self.stuck_after


def _play(item: _Item) -> None:
    done, fn, args, kwargs = item
    if not done.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        done.set_exception(exc)
    else:
        done.set_result(result)
