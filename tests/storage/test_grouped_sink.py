"""A grouping sink: iterations held and written together, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.registry import make_policy
from rollout_core.records import IterationBatch, ListSink
from rollout_core.settings import EnvironmentSettings
from storage.models import Episode, Run
from storage.read_models import EpisodeFilter
from storage.sink import GROUP_STEPS
from storage.store import Store
from tests.storage.prompt_checks import check_prompts, check_view
from tests.support.records import finish, play, spec, start, step
from tests.support.stores import play_run

HOUR = 3600.0  # long enough that only a flush (or GROUP_STEPS) writes


def _episodes(store: Store, run_id: int) -> list[tuple[str, int, str | None, int]]:
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,), finished_only=False), limit=500)
    return sorted((e.question_id, e.sample_index, e.outcome, e.steps) for e in page.items)


def _rows(store: Store, run_id: int) -> list[tuple[object, ...]]:
    """Every column of the run's episodes but the ids, the times and the measured duration."""
    skipped = ("id", "run_id", "started_at", "ended_at", "duration_seconds")
    columns = [c for c in Episode.__table__.c if c.name not in skipped]
    with Session(store._engine) as s:
        rows = s.execute(select(*columns).where(Episode.run_id == run_id)).all()
    return sorted(tuple(r) for r in rows)


def test_runner_through_a_grouping_sink_stores_what_one_transaction_each_does(
    store: Store,
) -> None:
    ds = load_named_dataset("demo")
    policy = make_policy("random")
    played = {}
    for name, group_seconds in (("each", 0.0), ("grouped", HOUR)):
        kept = ListSink()
        run_id = play_run(
            store, spec(name, policy="random"), ds, policy, questions=ds.questions[:12],
            samples=2, seed=3, group_seconds=group_seconds, status=None, keep=kept,
            batch_size=8, environment=EnvironmentSettings(step_budget=6),
        )  # fmt: skip
        played[name] = (run_id, kept.steps)
    (each, each_steps), (grouped_id, grouped_steps) = played["each"], played["grouped"]
    assert _episodes(store, grouped_id) == _episodes(store, each) != []
    # Grouped, every episode started and finished in one transaction: inserted whole.
    assert _rows(store, grouped_id) == _rows(store, each)
    assert check_prompts(store, {grouped_id: grouped_steps}) == len(grouped_steps) > 50
    assert check_view(store) == len(each_steps) + len(grouped_steps)
    a, b = store.get_run(each), store.get_run(grouped_id)
    assert a is not None and b is not None
    assert (a.episodes_finished, a.correct) == (b.episodes_finished, b.correct) == (24, a.correct)


def test_held_batches_reach_the_store_at_flush_in_one_transaction(store: Store) -> None:
    run_id = store.create_run(spec("held"), episodes_planned=2)
    sink = store.sink(run_id, group_seconds=HOUR)
    sink.write(IterationBatch(started=[start("q1"), start("q2")]))
    sink.write(IterationBatch(steps=[step("q1", 0, 1), step("q2", 0, 1)]))
    sink.write(
        IterationBatch(
            steps=[step("q1", 0, 2, action="ANSWER", done=True)],
            finished=[finish("q1", 0, "correct", 1.0, 2)],
        )
    )
    assert _episodes(store, run_id) == []  # nothing written yet: a reader sees no half
    sink.flush()
    assert _episodes(store, run_id) == [("q1", 0, "correct", 2), ("q2", 0, None, 1)]
    sink.write(IterationBatch(steps=[step("q2", 0, 2)]))
    sink.flush()
    sink.flush()  # nothing held: nothing to do
    assert _episodes(store, run_id) == [("q1", 0, "correct", 2), ("q2", 0, None, 2)]


def test_a_grouping_sink_writes_once_enough_time_has_passed(store: Store) -> None:
    run_id = store.create_run(spec("timed"), episodes_planned=1)
    sink = store.sink(run_id, group_seconds=1e-9)
    sink.write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    assert _episodes(store, run_id) == [("q1", 0, None, 1)]


def test_a_grouping_sink_writes_once_it_holds_group_steps(store: Store) -> None:
    run_id = store.create_run(spec("many"), episodes_planned=GROUP_STEPS)
    sink = store.sink(run_id, group_seconds=HOUR)
    half = GROUP_STEPS // 2
    first = [start(f"q{i}") for i in range(half)]
    sink.write(IterationBatch(started=first, steps=[step(s.question_id, 0, 1) for s in first]))
    assert _episodes(store, run_id) == []
    second = [start(f"r{i}") for i in range(half)]
    sink.write(IterationBatch(started=second, steps=[step(s.question_id, 0, 1) for s in second]))
    with Session(store._engine) as session:
        stored = session.scalar(select(func.count()).where(Episode.run_id == run_id))
    assert stored == 2 * half


def test_leaving_the_block_on_an_error_keeps_what_is_held_and_raises_the_error(
    store: Store,
) -> None:
    run_id = store.create_run(spec("error"), episodes_planned=1)
    with (
        pytest.raises(RuntimeError, match="policy broke"),
        store.sink(run_id, group_seconds=HOUR) as sink,
    ):
        sink.write(play("q1", 0, "correct", 1.0, 2))
        raise RuntimeError("policy broke")
    assert _episodes(store, run_id) == [("q1", 0, "correct", 2)]


def test_a_failed_group_is_dropped_not_written_twice(store: Store) -> None:
    run_id = store.create_run(spec("bad"), episodes_planned=2)
    sink = store.sink(run_id, group_seconds=HOUR)
    sink.write(play("q1", 0, "correct", 1.0, 1))
    sink.write(IterationBatch(steps=[step("q9", 0, 1)]))  # an episode never started
    with pytest.raises(ValueError, match="no started episode"):
        sink.flush()
    assert _episodes(store, run_id) == []  # the whole group, not half of it
    sink.flush()  # the failed group is gone: nothing raised again
    sink.write(play("q2", 0, "wrong", 0.0, 1))
    sink.flush()
    assert _episodes(store, run_id) == [("q2", 0, "wrong", 1)]


def test_an_error_while_leaving_on_an_error_does_not_hide_the_first(store: Store) -> None:
    run_id = store.create_run(spec("both"), episodes_planned=1)
    with (
        pytest.raises(RuntimeError, match="policy broke"),
        store.sink(run_id, group_seconds=HOUR) as sink,
    ):
        sink.write(IterationBatch(steps=[step("q9", 0, 1)]))  # fails when flushed
        raise RuntimeError("policy broke")


def test_the_heartbeat_moves_with_each_group(store: Store) -> None:
    run_id = store.create_run(spec("beat"), episodes_planned=1)
    with Session(store._engine) as session, session.begin():
        session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=None))
    with store.sink(run_id, group_seconds=HOUR) as sink:
        sink.write(play("q1", 0, "correct", 1.0, 1))
        run = store.get_run(run_id)
        assert run is not None and run.heartbeat_at is None
    run = store.get_run(run_id)
    assert run is not None and run.heartbeat_at is not None


def test_negative_group_seconds_is_refused(store: Store) -> None:
    run_id = store.create_run(spec("neg"), episodes_planned=1)
    with pytest.raises(ValueError, match="group_seconds must be 0 or more"):
        store.sink(run_id, group_seconds=-1)
