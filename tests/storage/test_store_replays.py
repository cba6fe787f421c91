"""A replayed episode (a fan-out shard retried after its worker died) replaces an unfinished
attempt and never duplicates a finished one, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeKey, IterationBatch
from storage.engine import get_engine
from storage.models import Episode, Step
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.records import finish, play, spec, start, step


def _episodes(store: Store, run_id: int) -> list[tuple[str, int, str | None, int]]:
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,), finished_only=False))
    return [(e.question_id, e.sample_index, e.outcome, e.steps) for e in page.items]


def _rows(store: Store, model: type[Episode] | type[Step]) -> int:
    with Session(get_engine(store._url)) as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_a_replay_replaces_the_unfinished_attempt(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    # The dead worker's attempt: started, two steps, never finished.
    store.sink(run_id).write(
        IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1), step("q1", 0, 2)])
    )
    retried = store.sink(run_id, skip_finished=True)
    retried.write(play("q1", 0, "correct", 1.0, 3, raw="replayed"))
    assert retried.skipped == set()
    assert _episodes(store, run_id) == [("q1", 0, "correct", 3)]
    detail = store.get_episode(store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items[0].id)
    assert detail is not None
    assert [(s.step_no, s.raw_output) for s in detail.steps] == [
        (1, "replayed"),
        (2, "replayed"),
        (3, "replayed"),
    ]
    assert (_rows(store, Episode), _rows(store, Step)) == (1, 3)


def test_a_replay_of_a_finished_episode_keeps_the_first_and_writes_the_rest(
    store: Store,
) -> None:
    run_id = store.create_run(spec(), episodes_planned=2)
    # Written and committed by a worker that died before reporting it.
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    retried = store.sink(run_id, skip_finished=True)
    retried.write(
        IterationBatch(
            started=[start("q1"), start("q2")], steps=[step("q1", 0, 1), step("q2", 0, 1)]
        )
    )
    retried.write(
        IterationBatch(
            steps=[
                step("q1", 0, 2, action="ANSWER", done=True),
                step("q2", 0, 2, action="ANSWER", done=True),
            ],
            finished=[finish("q1", 0, "wrong", 0.0, 2), finish("q2", 0, "correct", 1.0, 2)],
        )
    )
    assert retried.skipped == {EpisodeKey("q1", 0)}
    assert _episodes(store, run_id) == [("q1", 0, "correct", 2), ("q2", 0, "correct", 2)]
    assert (_rows(store, Episode), _rows(store, Step)) == (2, 4)
    assert store.finished_keys(run_id) == {EpisodeKey("q1", 0), EpisodeKey("q2", 0)}


def test_a_replay_finished_twice_in_one_batch_is_one_episode(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id, skip_finished=True).write(play("q1", 0, "correct", 1.0, 1))
    again = store.sink(run_id, skip_finished=True)
    again.write(play("q1", 0, "correct", 1.0, 1))
    assert again.skipped == {EpisodeKey("q1", 0)}
    assert (_rows(store, Episode), _rows(store, Step)) == (1, 1)
