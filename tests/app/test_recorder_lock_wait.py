"""The Recorder beside another writer of its SQLite store: while another connection holds the
write lock, the loop's calls that need no write return at once; what they handed over is
written once the lock is let go."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from app.recorder import Recorder
from storage.store import Store
from tests.app.importers.conftest import rows

TURNS = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER 5"}]
HOLD_SECONDS = 8.0
"""How long the other writer holds the lock: past the bound on a call below."""


def _stored(path: Path) -> int:
    reader = Store(f"sqlite:///{path}", read_only=True)
    try:
        return int(rows(reader, "SELECT count(*) FROM episodes")[0][0])
    finally:
        reader.close()


def test_a_call_that_writes_nothing_does_not_wait_on_another_writers_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    rec = Recorder(f"sqlite:///{path}", run="r", flush_seconds=0.1)
    rec.episode(question="Q?", turns=TURNS, reward=1.0)
    waited = time.monotonic()
    while _stored(path) != 1:  # the flusher wrote it: the store is made, in WAL mode
        assert time.monotonic() - waited < 10, "the held episode was not written"
        time.sleep(0.05)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # an import or a VACUUM, in another process as well
    letting_go = threading.Timer(HOLD_SECONDS, other.execute, ("ROLLBACK",))
    letting_go.start()
    try:
        rec.episode(question="Q?", turns=TURNS, reward=1.0)
        time.sleep(1.0)  # the flusher is in the write of it by now, waiting on the lock
        started = time.monotonic()
        for _ in range(3):
            rec.episode(question="Q?", turns=TURNS, reward=0.0)
        took = time.monotonic() - started
    finally:
        letting_go.join()
        other.close()
    rec.close()
    # Well under the lock's hold and SQLite's busy timeout: the loop did not wait on the store.
    assert took < 5, f"recording 3 rollouts took {took:.1f} s while another writer held the lock"
    assert _stored(path) == 5
    assert rec.store.get_run(rec.run_id).status == "completed"  # type: ignore[union-attr]
