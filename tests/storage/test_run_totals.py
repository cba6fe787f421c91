"""The totals on each run's row and its counts (what the Runs list and its charts read) equal
what the run's episodes say after every kind of write: steps, finishes, a resumed run's
restarts, dropped unfinished episodes, a re-finished episode, the migration's back-fill and a
bulk fill."""

from __future__ import annotations

import math
import random

import pytest
from alembic import command
from sqlalchemy import case, create_engine, func, inspect, select
from sqlalchemy.orm import Session

from rollout_core.records import FailureClass, IterationBatch, Outcome
from storage.engine import get_engine
from storage.migrations import alembic_config
from storage.models import Episode
from storage.store import Store
from tests.support.records import finish, spec, start, step
from tests.support.synthetic import fill_synthetic

_OUTCOMES: tuple[Outcome, ...] = ("correct", "wrong", "error", "budget_exhausted")
# A class the runner could give each outcome; records without one are classified by the store.
_CLASSES: dict[Outcome, FailureClass] = {
    "correct": "correct",
    "wrong": "wrong_answer",
    "error": "env_error",
    "budget_exhausted": "budget_exhausted",
}


def _truth(
    store: Store, run_id: int
) -> tuple[int, int, int, float | None, float | None, float | None]:
    """(finished, correct, errors, mean reward, mean steps, parse failure rate) from episodes."""
    finished = Episode.outcome.is_not(None)
    with Session(get_engine(store._url)) as session:
        n, ok, err, reward, fin_steps, steps, unparsed = session.execute(
            select(
                func.count(Episode.outcome),
                func.sum(case((Episode.outcome == "correct", 1), else_=0)),
                func.sum(case((Episode.outcome == "error", 1), else_=0)),
                func.sum(case((finished, Episode.reward), else_=0.0)),
                func.sum(case((finished, Episode.steps), else_=0)),
                func.sum(Episode.steps),
                func.sum(Episode.unparsed_steps),
            ).where(Episode.run_id == run_id)
        ).one()
    n, steps = int(n or 0), int(steps or 0)
    return (
        n,
        int(ok or 0),
        int(err or 0),
        float(reward) / n if n else None,
        float(fin_steps) / n if n else None,
        int(unparsed or 0) / steps if steps else None,
    )


def _shown(store: Store, run_id: int) -> tuple[object, ...]:
    run = store.get_run(run_id)
    assert run is not None
    return (
        run.episodes_finished,
        run.correct,
        run.errors,
        run.mean_reward,
        run.mean_steps,
        run.parse_failure_rate,
    )


def _distribution_truth(store: Store, run_id: int) -> tuple[object, ...]:
    """The Runs charts' numbers computed here from every episode row of the run."""
    with Session(get_engine(store._url)) as session:
        episodes = session.scalars(select(Episode).where(Episode.run_id == run_id)).all()
    done = [e for e in episodes if e.outcome is not None]
    actions = {
        a: sum(getattr(e, f"{a.lower()}_steps") for e in episodes)
        for a in ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER")
    } | {"UNPARSED": sum(e.unparsed_steps for e in episodes)}
    bins: dict[float, int] = {}
    for e in done:  # the nearest tenth, halves up
        k = math.floor(float(e.reward or 0.0) * 10 + 0.5 + 1e-9)
        centre = round(k * 0.1, 10)
        bins[centre] = bins.get(centre, 0) + 1
    steps: dict[int, int] = {}
    outcomes: dict[str, int] = {}
    classes: dict[str, int] = {}
    for e in done:
        steps[e.steps] = steps.get(e.steps, 0) + 1
        outcomes[str(e.outcome)] = outcomes.get(str(e.outcome), 0) + 1
        if e.failure_class is not None:
            classes[e.failure_class] = classes.get(e.failure_class, 0) + 1
    return actions, sorted(bins.items()), sorted(steps.items()), outcomes, classes


def _distribution_shown(store: Store, run_id: int) -> tuple[object, ...]:
    (d,) = store.run_distributions([run_id])
    return (
        d.action_mix,
        d.reward_histogram,
        d.steps_histogram,
        {k: n for k, n in d.outcome_counts.items() if n},
        {k: n for k, n in d.failure_counts.items() if n},
    )


def _assert_matches(store: Store, run_id: int) -> None:
    assert _shown(store, run_id) == pytest.approx(_truth(store, run_id), abs=1e-9)
    assert _distribution_shown(store, run_id) == _distribution_truth(store, run_id)


def test_totals_follow_every_write(store: Store) -> None:
    rng = random.Random(7)
    runs = [store.create_run(spec(f"run-{i}"), episodes_planned=40) for i in range(2)]
    sinks = {r: store.sink(r) for r in runs}
    live: dict[int, dict[str, int]] = {r: {} for r in runs}  # question -> steps written
    next_q = 0
    for turn in range(60):
        run_id = runs[turn % 2]
        episodes = live[run_id]
        started = []
        while len(episodes) < 4:
            q = f"q{next_q}"
            next_q += 1
            started.append(start(q))
            episodes[q] = 0
        steps, finished = [], []
        for q in list(episodes):
            episodes[q] += 1
            steps.append(step(q, 0, episodes[q], parsed=rng.random() < 0.7))
            if rng.random() < 0.35:
                outcome = rng.choice(_OUTCOMES)
                reward = round(rng.uniform(-1, 1), 3)  # rewards are kept in thousandths
                # Half of them classified, as the runner does: an episode started in this
                # batch is then inserted whole.
                cls = _CLASSES[outcome] if rng.random() < 0.5 else None
                finished.append(finish(q, 0, outcome, reward, episodes[q], failure_class=cls))
                del episodes[q]
        sinks[run_id].write(IterationBatch(started=started, steps=steps, finished=finished))
        _assert_matches(store, run_id)
        if turn % 13 == 12:
            # A resumed run: a new sink starts the unfinished episodes again from step 1.
            sinks[run_id] = store.sink(run_id)
            restarted = [start(q) for q in episodes]
            sinks[run_id].write(
                IterationBatch(started=restarted, steps=[step(q, 0, 1) for q in episodes])
            )
            live[run_id] = dict.fromkeys(episodes, 1)
            _assert_matches(store, run_id)
        if turn == 40:
            # `rollscope run --resume` of a run whose sink is gone drops what never finished.
            assert store.delete_unfinished_episodes(run_id) == len(episodes)
            live[run_id], sinks[run_id] = {}, store.sink(run_id)
            _assert_matches(store, run_id)
    for run_id in runs:
        _assert_matches(store, run_id)
        assert _shown(store, run_id)[0] > 10


def test_a_refinished_episode_counts_once(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    store.sink(run_id).write(IterationBatch(finished=[finish("q1", 0, "wrong", 0.0, 1)]))
    store.sink(run_id).write(IterationBatch(finished=[finish("q1", 0, "correct", 1.0, 1)]))
    _assert_matches(store, run_id)
    assert _shown(store, run_id)[:2] == (1, 1)


def test_a_reward_past_what_a_count_key_holds_is_counted_at_its_bound(store: Store) -> None:
    # Its key in thousandths was 309 digits, past the column's 64: PostgreSQL refused the write.
    run_id = store.create_run(spec(), episodes_planned=3)
    rewards = {"q1": 1e308, "q2": -1e308, "q3": 0.5}
    store.sink(run_id).write(
        IterationBatch(
            started=[start(q) for q in rewards],
            steps=[step(q, 0, 1) for q in rewards],
            finished=[finish(q, 0, "wrong", r, 1) for q, r in rewards.items()],
        )
    )
    with Session(get_engine(store._url)) as session:
        stored = session.execute(select(Episode.question_id, Episode.reward)).all()
    assert dict(stored) == rewards  # the episodes keep them whole
    (shown,) = store.run_distributions([run_id])
    starts = [start for start, _ in shown.reward_histogram]
    assert starts[0] == pytest.approx(-1e60) and starts[-1] == pytest.approx(1e60)


def test_the_migration_back_fills_the_totals(store_url: str) -> None:
    store = Store(store_url)
    run_id = store.create_run(spec(), episodes_planned=3)
    store.sink(run_id).write(
        IterationBatch(
            started=[start("q1"), start("q2"), start("q3")],
            steps=[step("q1", 0, 1), step("q2", 0, 1, parsed=False), step("q3", 0, 1)],
            finished=[finish("q1", 0, "correct", 1.0, 1), finish("q2", 0, "error", -1.0, 1)],
        )
    )
    expected = _truth(store, run_id)
    store.close()
    engine = create_engine(store_url)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006")
        assert "finished_episodes" not in {c["name"] for c in inspect(conn).get_columns("runs")}
        command.upgrade(cfg, "head")
    engine.dispose()
    store = Store(store_url)
    try:
        assert _shown(store, run_id) == pytest.approx(expected, abs=1e-9)
        assert expected[:3] == (2, 1, 1)
    finally:
        store.close()


def test_a_bulk_fill_sets_the_totals(store: Store) -> None:
    (run_id,) = fill_synthetic(store, runs=1, episodes_per_run=60, steps_per_episode=3)
    _assert_matches(store, run_id)
    assert _shown(store, run_id)[0] == 60
