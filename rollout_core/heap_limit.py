"""SQLite's hard heap limit, raised only while a sandboxed statement runs.

SQLite has one heap limit per process. Set for good (`PRAGMA hard_heap_limit`), it also caps
every other connection in the process, the store's included, and a PRAGMA can only lower it,
never lift it. So the sandbox calls the C functions through ctypes, in the very library Python's
`sqlite3` module uses (a probe checks that): while a statement runs, the ceiling is the heap in
use plus the statement's budget; when the last running statement ends, the limits in force
before are back. Overlapping statements (threads) each add their budget to one shared total.
A connection outside the sandbox is only capped while a sandboxed statement runs, and only when
the statements running used up their budgets: the store's writes and the environment's own
reads then fail for want of heap, and wait for those statements to end and try again
(`wait_for_statements`, `after_statements`).

Where the C functions cannot be reached (an interpreter whose SQLite symbols are hidden),
`heap_ceiling()` is None and the sandbox falls back to a permanent `PRAGMA hard_heap_limit`.
"""

from __future__ import annotations

import ctypes
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TypeVar

T = TypeVar("T")

_FUNCTIONS = ("sqlite3_hard_heap_limit64", "sqlite3_soft_heap_limit64", "sqlite3_memory_used")


class HeapCeiling:
    """Raises and restores SQLite's process-wide hard heap limit around sandboxed statements."""

    def __init__(self, lib: ctypes.PyDLL) -> None:
        self._hard = lib.sqlite3_hard_heap_limit64
        self._soft = lib.sqlite3_soft_heap_limit64
        self._used = lib.sqlite3_memory_used
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._active = 0
        self._budgets = 0
        self._base = 0
        self._saved = (0, 0)

    def memory_used(self) -> int:
        """Bytes SQLite has allocated in this process, all connections together."""
        return int(self._used())

    def limits(self) -> tuple[int, int]:
        """The (hard, soft) heap limits in force now; 0 means none."""
        return int(self._hard(-1)), int(self._soft(-1))

    @contextmanager
    def around(self, budget: int) -> Iterator[None]:
        """Let the statement run inside allocate at most `budget` more bytes of SQLite heap."""
        with self._lock:
            if self._active == 0:
                self._saved = self.limits()
                self._base = self.memory_used()
            self._active += 1
            self._budgets += budget
            self._hard(self._ceiling())
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                self._budgets -= budget
                if self._active:
                    self._hard(self._ceiling())
                else:
                    # Setting a hard limit also lowers the soft one: put both back, hard first.
                    self._hard(self._saved[0])
                    self._soft(self._saved[1])
                self._ended.notify_all()

    def wait_for_statements(self, timeout: float) -> None:
        """Return once a sandboxed statement running now has ended (its heap freed and the
        ceiling lowered), none runs, or `timeout` seconds have passed."""
        with self._lock:
            if self._active:
                self._ended.wait(timeout)

    def _ceiling(self) -> int:
        ceiling = self._base + self._budgets
        hard_before = self._saved[0]
        return min(ceiling, hard_before) if hard_before > 0 else ceiling


def after_statements(fn: Callable[[], T], *, tries: int = 3, wait_seconds: float = 5.0) -> T:
    """`fn()`, run again when it ran out of SQLite heap while sandboxed statements held the
    process's limit, once a statement has ended (their deadlines end them)."""
    for attempt in range(tries):
        try:
            return fn()
        except MemoryError:
            ceiling = heap_ceiling()
            if ceiling is None or attempt == tries - 1:
                raise
            ceiling.wait_for_statements(wait_seconds)
    raise AssertionError("unreachable")


_FIND_LOCK = threading.Lock()


def heap_ceiling() -> HeapCeiling | None:
    """The process's ceiling, or None when SQLite's C functions cannot be reached."""
    with _FIND_LOCK:  # one instance per process: its counters must see every statement
        return _find()


@cache
def _find() -> HeapCeiling | None:
    import _sqlite3

    for name in (getattr(_sqlite3, "__file__", None), None):
        try:
            # PyDLL keeps the GIL: the calls take microseconds and releasing it costs more.
            lib = ctypes.PyDLL(name)
        except (OSError, TypeError):  # TypeError: PyDLL(None) on Windows
            continue
        if not all(hasattr(lib, function) for function in _FUNCTIONS):
            continue
        for function in _FUNCTIONS:
            getattr(lib, function).restype = ctypes.c_int64
        lib.sqlite3_hard_heap_limit64.argtypes = [ctypes.c_int64]
        lib.sqlite3_soft_heap_limit64.argtypes = [ctypes.c_int64]
        lib.sqlite3_memory_used.argtypes = []
        if _same_library(lib):
            return HeapCeiling(lib)
    return None


def _same_library(lib: ctypes.PyDLL) -> bool:
    """True when `lib` is the SQLite that `sqlite3` uses: a soft limit set here reads back there."""
    probe = sqlite3.connect(":memory:")
    soft = lib.sqlite3_soft_heap_limit64
    before = int(soft(-1))
    try:
        # Below the current soft limit (which never exceeds a hard one), or a fresh value.
        marker = before - 1 if before > 1 else 1 << 40
        soft(marker)
        return bool(probe.execute("PRAGMA soft_heap_limit").fetchone()[0] == marker)
    finally:
        soft(before)
        probe.close()
