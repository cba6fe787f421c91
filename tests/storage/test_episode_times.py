"""An episode's `started_at` and `ended_at` are when it was played, not when the store wrote
it: a grouping sink writes many episodes at once, and plain SQL still reads each one's times,
which agree with its `duration_seconds`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.registry import make_policy
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import spec
from tests.support.stores import play_run

HOUR = 3600.0  # the sink holds every iteration until it closes: one write for the whole run


def _utc(value: Any) -> datetime:
    """A time as SQL hands it back: text from SQLite, a datetime from PostgreSQL."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def test_episode_times_are_when_it_was_played_though_written_together(store_url: str) -> None:
    demo = load_named_dataset("demo")
    store = Store(store_url)
    before = datetime.now(UTC)
    play_run(store, spec("timed", policy="oracle"), demo, make_policy("oracle"),
             group_seconds=HOUR, batch_size=4)  # fmt: skip
    after = datetime.now(UTC)
    store.close()
    rows = sql_rows(
        store_url, "SELECT started_at, ended_at, duration_seconds FROM episodes ORDER BY id"
    )
    assert len(rows) == len(demo.questions) > 4
    times = [(_utc(start), _utc(end), seconds) for start, end, seconds in rows]
    for start, end, seconds in times:
        assert before <= start <= end <= after
        assert abs((end - start).total_seconds() - seconds) < 0.001, (start, end, seconds)
    starts = sorted({start for start, _, _ in times})
    assert len(starts) == len(times), "each episode began at its own time"
    assert starts[-1] > min(end for _, end, _ in times), "later episodes began as others ended"
