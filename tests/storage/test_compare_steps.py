"""Compare's reads over training steps of a run (`RunStep`), beside whole runs: the counts,
episodes, distributions and figures of one step alone, against hand-counted values."""

from __future__ import annotations

import pytest

from storage.read_models import EpisodeFilter, RunStep
from storage.store import Store
from storage.training import finished_steps, run_at_step
from tests.support.records import play, spec
from tests.support.stores import paged_question_ids, play_group, write_run


@pytest.fixture
def evaluated(store: Store) -> tuple[Store, int, int]:
    """An evaluation at training steps 100 and 200 on q1 and q2, two samples each (correct
    from a reward of 1), and a batch run on q1 and q3."""
    val = store.create_run(spec("val", kind="training"), episodes_planned=8)
    sink = store.sink(val)
    play_group(sink, "q1", range(0, 2), [1.0, 0.0], (100, 0), unparsed=1)  # 1 of 2 right
    play_group(sink, "q2", range(0, 2), [0.0, 0.0], (100, 1))  # 0 of 2
    play_group(sink, "q1", range(2, 4), [1.0, 1.0], (200, 2))  # 2 of 2
    play_group(sink, "q2", range(2, 4), [1.0, 0.5], (200, 3))  # 1 of 2
    store.set_run_status(val, "completed")
    batch = write_run(
        store,
        spec("oracle"),
        [play("q1", 0, "correct", 1.0, 2), play("q3", 0, "wrong", 0.0, 1)],
    )
    return store, val, batch


def _counts(rows: list) -> dict[str, dict[object, tuple[int, int]]]:  # type: ignore[type-arg]
    return {r.question_id: {k: (c.episodes, c.correct) for k, c in r.cells.items()} for r in rows}


def test_a_training_step_counts_its_episodes_alone_beside_its_run(
    evaluated: tuple[Store, int, int],
) -> None:
    store, val, batch = evaluated
    first, last = RunStep(val, 100), RunStep(val, 200)
    assert _counts(store.compare_outcomes([first, last, val, batch])) == {
        "q1": {first: (2, 1), last: (2, 2), val: (4, 3), batch: (1, 1)},
        "q2": {first: (2, 0), last: (2, 1), val: (4, 1)},
        "q3": {batch: (1, 0)},
    }
    # A step of no episodes has no cells; the others are unchanged.
    assert _counts(store.compare_outcomes([RunStep(val, 150), last])) == {
        "q1": {last: (2, 2)},
        "q2": {last: (2, 1)},
    }


def test_a_training_steps_cells_hold_that_steps_episodes(
    evaluated: tuple[Store, int, int],
) -> None:
    store, val, batch = evaluated
    first, last = RunStep(val, 100), RunStep(val, 200)
    listed = store.list_episodes(EpisodeFilter(run_ids=(val,)), limit=100).items
    at = {e.id: e.train_step for e in listed}
    page = store.compare_runs([first, last, val])
    assert [r.question_id for r in page.items] == ["q1", "q2"]
    for row in page.items:
        assert {at[e] for e in row.cells[first].episode_ids} == {100}
        assert {at[e] for e in row.cells[last].episode_ids} == {200}
        assert sorted(row.cells[val].episode_ids) == sorted(
            row.cells[first].episode_ids + row.cells[last].episode_ids
        )
        assert row.cells[first].run_id == val
    one = store.compare_question([last, batch], "q1")
    assert one is not None and one.question == "How many rows for q1?"
    assert {k: len(c.episode_ids) for k, c in one.cells.items()} == {last: 2, batch: 1}
    assert store.compare_question([first], "q3") is None
    # Paged a question at a time, with the cursor naming the steps.
    assert paged_question_ids(store, [first, batch]) == ["q1", "q2", "q3"]
    with pytest.raises(ValueError):
        store.compare_runs(
            [last, batch], cursor=store.compare_runs([first, batch], limit=1).next_cursor
        )


def test_a_training_steps_distribution_and_figures_are_its_own(
    evaluated: tuple[Store, int, int],
) -> None:
    store, val, _ = evaluated
    assert finished_steps(store, val) == [100, 200]
    first, whole = store.run_distributions([RunStep(val, 100), val])
    assert (first.run_id, first.train_step, first.key) == (val, 100, RunStep(val, 100))
    assert whole.train_step is None and whole.key == val
    assert first.outcome_counts["correct"] == 1 and first.outcome_counts["wrong"] == 3
    assert whole.outcome_counts["correct"] == 4 and whole.outcome_counts["wrong"] == 4
    assert first.failure_counts["correct"] == 1 and sum(first.failure_counts.values()) == 4
    # One of the step's four steps had no action line.
    assert first.action_mix["UNPARSED"] == 1 and sum(first.action_mix.values()) == 4
    assert whole.action_mix["UNPARSED"] == 1 and sum(whole.action_mix.values()) == 8

    run = store.get_run(val)
    assert run is not None
    at = run_at_step(store, run, 200)
    assert (at.id, at.name, at.train_step, at.key, at.label) == (
        val, "val", 200, RunStep(val, 200), "val @ step 200"
    )  # fmt: skip
    assert (at.episodes_finished, at.correct, at.accuracy) == (4, 3, 0.75)
    assert at.mean_reward == pytest.approx((1.0 + 1.0 + 1.0 + 0.5) / 4)
    assert at.mean_steps == 1.0 and at.parse_failure_rate == 0.0
    assert run_at_step(store, run, 100).parse_failure_rate == 0.25
    assert (run.key, run.label, run.episodes_finished) == (val, "val", 8)
    empty = run_at_step(store, run, 150)
    assert (empty.episodes_finished, empty.accuracy, empty.mean_reward) == (0, None, None)


def test_the_question_map_takes_training_steps_as_columns(
    evaluated: tuple[Store, int, int],
) -> None:
    store, val, batch = evaluated
    first, last = RunStep(val, 100), RunStep(val, 200)
    matrix = store.outcome_matrix([first, last, batch, val])
    assert matrix.run_ids == [first, last, batch, val]
    assert matrix.question_ids == ["q1", "q2", "q3"]
    assert matrix.episodes == [[2, 2, 1, 4], [2, 2, 0, 4], [0, 0, 1, 0]]
    assert matrix.correct == [[1, 2, 1, 3], [0, 1, 0, 1], [0, 0, 0, 0]]
