"""Revision 0017: an episode rollscope did not play (an import's, a Recorder's) has no seed,
start or end time. A store at 0016 (where they read 0 and the time of the import) upgrades
with those NULL, its episodes, steps and search index kept, and every seed and time of an
episode rollscope played as it was."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rollout_core.records import IterationBatch
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to


def _unseeded(batch: IterationBatch) -> IterationBatch:
    """The batch as an importer or the Recorder writes it: no seed, and no times."""
    return IterationBatch(
        [replace(s, seed=None, started_at=None) for s in batch.started],
        batch.steps,
        [replace(e, ended_at=None) for e in batch.finished],
    )


def _episodes(url: str) -> list[tuple[Any, ...]]:
    """(run, seed, started_at is set, ended_at is set), read with SQL."""
    return sql_rows(
        url,
        "SELECT r.name, e.seed, e.started_at IS NOT NULL, e.ended_at IS NOT NULL "
        "FROM episodes e JOIN runs r ON r.id = e.run_id ORDER BY e.id",
    )


def _found(store: Store) -> list[int]:
    """The episodes a text search for q2's question finds."""
    page = store.list_episodes(EpisodeFilter(text="rows for q2"))
    return [e.id for e in page.items]


def test_seeds_and_times_of_rollouts_played_elsewhere_are_null_and_survive_a_round_trip(
    store_url: str,
) -> None:
    store = Store(store_url)
    for name, kind, source, batch in (
        ("played", "batch", None, play("q1", 3, "correct", 1.0, 2)),
        ("imported", "import", "verl", _unseeded(play("q2", 0, "wrong", 0.0, 2))),
        ("recorded", "training", "recorder", _unseeded(play("q3", 0, "correct", 1.0, 1))),
    ):
        run_id = store.create_run(spec(name, kind=kind), episodes_planned=1, source_format=source)
        store.sink(run_id).write(batch)
    found_before = _found(store)
    assert len(found_before) == 1
    store.close()
    at_head = [
        ("played", 1003, 1, 1),
        ("imported", None, 0, 0),
        ("recorded", None, 0, 0),
    ]
    assert _episodes(store_url) == at_head

    downgrade_to(store_url, "0016")  # 0 and the import's time stood in for what nobody knows
    assert _episodes(store_url) == [
        ("played", 1003, 1, 1),
        ("imported", 0, 1, 1),
        ("recorded", 0, 1, 1),
    ]

    store = Store(store_url)  # a writer upgrades on open
    assert _episodes(store_url) == at_head
    assert _found(store) == found_before  # the search index points at the same episode ids
    steps = sql_rows(
        store_url, "SELECT count(*) FROM steps s JOIN episodes e ON e.id = s.episode_id"
    )
    store.close()
    assert steps == [(5,)]
