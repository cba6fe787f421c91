"""Every session's records into the run's one sink, each batch committed before its session
answers its client.

Sessions hand their batches to one writer thread and wait. The thread writes whatever has
arrived since its last commit as one transaction (a group commit): the batches are of
different episodes, and a session sends its next batch only after its last one is stored, so
no episode has two batches in one group. One commit per group instead of per step is what
lets dozens of sessions step at once on SQLite, whose writers take turns.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from rollout_core.records import IterationBatch
from storage.sink import StoreSink
from storage.writes import merged

_STOP = None
GATHER_SECONDS = 0.002
"""How long a commit waits for the steps other sessions are playing at that moment: a commit
costs about as much as the rows of several steps, so fewer, larger ones serve more clients."""


class GroupWriter:
    """A thread that writes the batches it is given through `sink`, grouped."""

    def __init__(self, sink: StoreSink) -> None:
        self.sink = sink
        self._queue: queue.SimpleQueue[tuple[IterationBatch, Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._closed = False
        self._playing = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rollscope-env-writer", daemon=True)
        self._thread.start()

    @contextmanager
    def playing(self) -> Iterator[None]:
        """Around a session's step, up to its `submit`: the writer may wait for it."""
        with self._lock:
            self._playing += 1
        try:
            yield
        finally:
            with self._lock:
                self._playing -= 1

    def write(self, batch: IterationBatch) -> None:
        """Store `batch`; returns once it is committed (raises what the store raised)."""
        self.submit(batch).result()

    def submit(self, batch: IterationBatch) -> Future[None]:
        """Queue `batch`; the future is done once it is committed."""
        done: Future[None] = Future()
        with self._lock:  # nothing is queued behind the stop
            if self._closed:
                done.set_exception(RuntimeError("the server is stopping: nothing more is recorded"))
            else:
                self._queue.put((batch, done))
        return done

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            group = [item]
            stop = False
            if self._playing:  # steps about to be submitted: let them join this commit
                time.sleep(GATHER_SECONDS)
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                group.append(more)
            self._write(group)
            if stop:
                return

    def _write(self, group: list[tuple[IterationBatch, Future[None]]]) -> None:
        try:
            self.sink.write(group[0][0] if len(group) == 1 else merged([b for b, _ in group]))
        except Exception as exc:
            if len(group) == 1:
                group[0][1].set_exception(exc)
                return
            # One bad batch must not fail the others: each is tried alone.
            for batch, done in group:
                self._write([(batch, done)])
            return
        for _, done in group:
            done.set_result(None)
