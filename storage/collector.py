"""Python's cyclic garbage collector paused while tens of thousands of objects are made."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, back on after (if it was on).

    A batch's write, or a read of a whole run's questions, makes tens of thousands of
    containers (rows, records, cells), none in a cycle, so reference counting frees them all;
    the collector's passes over them are pure cost (docs/benchmarks.md), and promote them to
    older generations whose full passes walk the whole process. Safe with threads: each
    caller restores only what it found.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
