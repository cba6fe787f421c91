"""Run metrics, distributions and the per-question comparison, against hand-counted values."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rollout_core.records import IterationBatch
from storage.store import Store
from tests.support.records import play, spec, start, step
from tests.support.stores import paged_question_ids, write_run


@pytest.fixture
def two_runs(store: Store) -> tuple[Store, int, int]:
    """ckpt-1000 and ckpt-2000 on overlapping questions, two samples each; counts in comments."""
    # ckpt-1000: 5 finished; steps 2+3+1+4+2 = 12, unparsed 1+0+0+2+0 = 3.
    r1 = write_run(store, spec("ckpt-1000"), [
        play("q1", 0, "correct", 1.0, 2, unparsed=1),
        play("q1", 1, "wrong", -0.25, 3, sql_errors=2),
        play("q2", 0, "correct", 1.05, 1),
        play("q2", 1, "budget_exhausted", 0.3, 4, unparsed=2),
        play("q3", 0, "error", 0.0, 2),
        # ... and one still playing (1 unparsed step): counts for the parse rate only.
        IterationBatch(started=[start("q3", 1)], steps=[step("q3", 1, 1, parsed=False)]),
    ], status=None)  # fmt: skip
    # ckpt-2000: q2 (both correct) and q4 (one wrong); no q1, q3.
    r2 = write_run(store, spec("ckpt-2000"), [
        play("q2", 0, "correct", 1.0, 2),
        play("q2", 1, "correct", 1.0, 2),
        play("q4", 0, "wrong", 0.0, 3),
    ], planned=6, status=None)  # fmt: skip
    return store, r1, r2


def test_run_metrics_exact(two_runs: tuple[Store, int, int]) -> None:
    store, r1, r2 = two_runs
    one = store.get_run(r1)
    assert one is not None
    assert (one.episodes_finished, one.correct) == (5, 2)
    assert one.accuracy == pytest.approx(2 / 5)
    assert one.mean_reward == pytest.approx((1.0 - 0.25 + 1.05 + 0.3 + 0.0) / 5)
    assert one.mean_steps == pytest.approx(12 / 5)
    assert one.parse_failure_rate == pytest.approx((3 + 1) / (12 + 1))
    two = store.get_run(r2)
    assert two is not None
    assert (two.episodes_finished, two.correct) == (3, 2)
    assert two.accuracy == pytest.approx(2 / 3)
    assert two.parse_failure_rate == 0.0
    listed = {r.id: r for r in store.list_runs()}
    for run in (one, two):
        # The same numbers through list_runs (float sums may differ in the last bit).
        assert listed[run.id].mean_reward == pytest.approx(run.mean_reward)
        assert replace(listed[run.id], mean_reward=0.0) == replace(run, mean_reward=0.0)


def test_empty_run_metrics(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=3)
    run = store.get_run(run_id)
    assert run is not None
    assert (run.episodes_finished, run.correct) == (0, 0)
    assert (run.accuracy, run.mean_reward, run.mean_steps, run.parse_failure_rate) == (
        None, None, None, None,
    )  # fmt: skip


def test_distributions_exact(two_runs: tuple[Store, int, int]) -> None:
    store, r1, r2 = two_runs
    d1, d2 = store.run_distributions([r1, r2])
    assert d1.run_id == r1 and d2.run_id == r2
    # r1 steps: each finished episode ends with ANSWER (5); the rest are QUERY, of which
    # 3 unparsed; plus the unfinished episode's unparsed step.
    assert d1.action_mix == {"DESCRIBE": 0, "SAMPLE": 0, "QUERY": 4, "ANSWER": 5, "UNPARSED": 4}
    # Rewards -0.25, 0.0, 0.3, 1.0, 1.05, each at its nearest tenth (halves up).
    assert d1.reward_histogram == [(-0.2, 1), (0.0, 1), (0.3, 1), (1.0, 1), (1.1, 1)]
    assert d1.steps_histogram == [(1, 1), (2, 2), (3, 1), (4, 1)]
    assert d1.outcome_counts == {
        "correct": 2, "wrong": 1, "budget_exhausted": 1, "error": 1, "abandoned": 0
    }  # fmt: skip
    assert d2.reward_histogram == [(0.0, 1), (1.0, 2)]
    assert d2.steps_histogram == [(2, 2), (3, 1)]
    assert d2.outcome_counts == {
        "correct": 2, "wrong": 1, "budget_exhausted": 0, "error": 0, "abandoned": 0
    }  # fmt: skip
    assert store.run_distributions([]) == []


def test_reward_bins_survive_float_error(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=3)
    # 0.7 / 0.1 is 6.999999999999999 in floating point, and 0.65 * 10 is 6.5 only nearly:
    # still the bin of 0.7.
    for i, reward in enumerate([0.1, 0.7, 0.65, 0.749]):
        store.sink(run_id).write(play(f"q{i}", 0, "wrong", reward, 1))
    (d,) = store.run_distributions([run_id])
    assert d.reward_histogram == [(0.1, 1), (0.7, 3)]


def test_runs_share_one_grid_of_reward_bins(store: Store) -> None:
    runs = [store.create_run(spec(f"r{i}"), episodes_planned=2) for i in range(2)]
    for run_id, rewards in zip(runs, ([-0.04, 1.1], [0.0, 0.99, 1.1]), strict=True):
        for i, reward in enumerate(rewards):
            store.sink(run_id).write(play(f"q{i}", 0, "wrong", reward, 1))
    first, second = store.run_distributions(runs)
    assert first.reward_histogram == [(0.0, 1), (1.1, 1)]
    assert second.reward_histogram == [(0.0, 1), (1.0, 1), (1.1, 1)]


def test_compare_runs_cells(two_runs: tuple[Store, int, int]) -> None:
    store, r1, r2 = two_runs
    page = store.compare_runs([r1, r2])
    assert page.next_cursor is None
    got = {
        q.question_id: {r: (c.episodes, c.correct, len(c.episode_ids)) for r, c in q.cells.items()}
        for q in page.items
    }
    assert got == {
        "q1": {r1: (2, 1, 2)},
        "q2": {r1: (2, 1, 2), r2: (2, 2, 2)},
        "q3": {r1: (1, 0, 1)},  # the unfinished sample is not counted
        "q4": {r2: (1, 0, 1)},
    }
    q2 = next(q for q in page.items if q.question_id == "q2")
    assert q2.cells[r1].success_rate == 0.5 and q2.cells[r2].success_rate == 1.0
    assert (q2.db_id, q2.question) == ("concert_singer", "How many rows for q2?")
    for eid in q2.cells[r2].episode_ids:
        detail = store.get_episode(eid)
        assert detail is not None and detail.summary.run_id == r2


def test_a_question_list_holds_counts_and_one_question_its_episodes(
    two_runs: tuple[Store, int, int],
) -> None:
    store, r1, r2 = two_runs
    full = store.compare_runs([r1, r2])
    counts = store.compare_runs([r1, r2], with_episode_ids=False)
    assert [q.question_id for q in counts.items] == [q.question_id for q in full.items]
    for slim, whole in zip(counts.items, full.items, strict=True):
        assert (slim.db_id, slim.question) == (whole.db_id, whole.question)
        assert {r: (c.episodes, c.correct, c.episode_ids) for r, c in slim.cells.items()} == {
            r: (c.episodes, c.correct, []) for r, c in whole.cells.items()
        }
        assert store.compare_question([r1, r2], whole.question_id) == whole
    assert store.compare_question([r1, r2], "no-such-question") is None
    only_r2 = store.compare_question([r2], "q2")
    assert only_r2 is not None and set(only_r2.cells) == {r2}


def test_compare_runs_paging(two_runs: tuple[Store, int, int]) -> None:
    store, r1, r2 = two_runs
    assert paged_question_ids(store, [r1, r2]) == ["q1", "q2", "q3", "q4"]
    first = store.compare_runs([r1, r2], limit=1)
    with pytest.raises(ValueError, match="page cursor was made for runs="):
        store.compare_runs([r1], cursor=first.next_cursor)
    assert store.compare_runs([]).items == []


def test_compare_outcomes_counts_every_question(two_runs: tuple[Store, int, int]) -> None:
    store, r1, r2 = two_runs
    outcomes = store.compare_outcomes([r1, r2])
    got = {
        o.question_id: {r: (c.episodes, c.correct) for r, c in o.cells.items()} for o in outcomes
    }
    assert got == {
        "q1": {r1: (2, 1)},
        "q2": {r1: (2, 1), r2: (2, 2)},
        "q3": {r1: (1, 0)},
        "q4": {r2: (1, 0)},
    }
    assert [o.question_id for o in outcomes] == ["q1", "q2", "q3", "q4"]
    assert [o.question_id for o in store.compare_outcomes([r2])] == ["q2", "q4"]
    assert store.compare_outcomes([]) == []


def test_iter_episode_details_streams_finished_episodes(two_runs: tuple[Store, int, int]) -> None:
    store, r1, _r2 = two_runs
    details = list(store.iter_episode_details(r1, batch=2))
    assert [d.summary.question_id for d in details] == ["q1", "q1", "q2", "q2", "q3"]
    assert [len(d.steps) for d in details] == [2, 3, 1, 4, 2]
    assert all(d.run.id == r1 for d in details)
    assert [s.step_no for s in details[3].steps] == [1, 2, 3, 4]
    assert list(store.iter_episode_details(999)) == []


def test_list_db_ids(two_runs: tuple[Store, int, int]) -> None:
    store, r1, _r2 = two_runs
    assert store.list_db_ids() == ["concert_singer"]
    assert store.list_db_ids([r1]) == ["concert_singer"]
    assert store.list_db_ids([999]) == []
