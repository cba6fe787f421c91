"""The question x checkpoint map: matrix order, flips, accuracy intervals."""

from __future__ import annotations

import numpy as np
import pytest

from app.dashboard import analysis
from app.dashboard.question_map.matrix import (
    accuracy_intervals,
    build_map,
    first_with_flips,
    flips,
    played_by_all,
)
from storage.read_models import OutcomeMatrix


def _matrix(table: dict[str, dict[int, tuple[int, int]]], run_ids: list[int]) -> OutcomeMatrix:
    """question -> run -> (episodes, correct), as the store returns it."""
    qids = sorted(table)
    return OutcomeMatrix(
        run_ids=run_ids,
        question_ids=qids,
        episodes=[[table[q].get(r, (0, 0))[0] for r in run_ids] for q in qids],
        correct=[[table[q].get(r, (0, 0))[1] for r in run_ids] for q in qids],
    )


TABLE: dict[str, dict[int, tuple[int, int]]] = {
    "q-easy": {1: (2, 2), 2: (2, 2), 3: (2, 2)},
    "q-lost": {1: (2, 2), 2: (2, 0), 3: (2, 1)},  # solved, lost, solved again (1/2)
    "q-won": {1: (2, 0), 2: (2, 1), 3: (2, 2)},
    "q-hard": {1: (2, 0), 2: (2, 0), 3: (2, 0)},
    "q-late": {3: (2, 2)},  # only the last run played it
}


def test_questions_are_ordered_easiest_first_and_unplayed_cells_are_empty() -> None:
    qmap = build_map(_matrix(TABLE, [1, 2, 3]))
    assert qmap.question_ids == ["q-easy", "q-late", "q-lost", "q-won", "q-hard"]
    late = qmap.rates[qmap.row("q-late")]
    assert np.isnan(late[0]) and np.isnan(late[1]) and late[2] == 1.0
    assert qmap.rates[qmap.row("q-lost")].tolist() == [1.0, 0.0, 0.5]
    assert qmap.episodes[qmap.row("q-late")].tolist() == [0, 0, 2]


def test_runs_keep_the_order_given_and_unknown_runs_are_empty_columns() -> None:
    qmap = build_map(_matrix(TABLE, [3, 1, 9]))
    assert qmap.run_ids == [3, 1, 9]
    assert np.isnan(qmap.rates[:, 2]).all()


def test_the_map_over_the_questions_every_run_played_keeps_their_order() -> None:
    whole = build_map(_matrix(TABLE, [1, 2, 3]))
    assert not whole.complete
    shared = played_by_all(whole)
    assert shared.complete and shared.run_ids == [1, 2, 3]
    assert shared.question_ids == ["q-easy", "q-lost", "q-won", "q-hard"]  # q-late left out
    assert shared.rates[shared.row("q-lost")].tolist() == [1.0, 0.0, 0.5]
    assert shared.episodes.shape == (4, 3)
    none = played_by_all(build_map(_matrix(TABLE, [1, 9])))  # run 9 played nothing
    assert none.question_ids == [] and none.rates.shape == (0, 2)


def test_flips_between_consecutive_runs_over_shared_questions() -> None:
    pairs = flips(build_map(_matrix(TABLE, [1, 2, 3])))
    assert [(p.run_before, p.run_after) for p in pairs] == [(1, 2), (2, 3)]
    first, second = pairs
    assert [f.question_id for f in first.regressions] == ["q-lost"]
    assert [f.question_id for f in first.improvements] == ["q-won"]  # 0/2 -> 1/2 is solved
    assert (first.regressions[0].rate_before, first.regressions[0].rate_after) == (1.0, 0.0)
    assert second.regressions == []
    assert sorted(f.question_id for f in second.improvements) == ["q-lost"]
    assert (first.shared, second.shared) == (4, 4)  # q-late is not shared


@pytest.mark.parametrize("holes", [True, False])
def test_accuracy_intervals_equal_a_direct_bootstrap_with_the_same_draws(holes: bool) -> None:
    rng = np.random.default_rng(5)
    n, runs = 300, 4
    table = {
        f"q{i:03d}": {
            r: (4, int(rng.integers(0, 5))) for r in range(runs) if not holes or (i + r) % 7
        }
        for i in range(n)
    }
    qmap = build_map(_matrix(table, list(range(runs))))
    points = accuracy_intervals(qmap, resamples=600, seed=3)
    # the same draws, resampled the slow way
    draws = np.random.default_rng(3)
    idx = np.concatenate(
        [draws.integers(0, n, size=(b, n)) for b in (250, 250, 100)]
    )  # the blocks accuracy_intervals draws in
    for j, point in enumerate(points):
        rates = qmap.rates[:, j]
        sampled = rates[idx]
        means = np.nanmean(sampled, axis=1)
        low, high = np.quantile(means, [0.025, 0.975])
        assert point.accuracy == pytest.approx(np.nanmean(rates))
        assert point.low == pytest.approx(low) and point.high == pytest.approx(high)
        assert point.questions == int((~np.isnan(rates)).sum())
        assert point.low is not None and point.accuracy is not None and point.high is not None
        assert point.low <= point.accuracy <= point.high


def test_a_run_that_played_nothing_has_no_accuracy() -> None:
    (point,) = accuracy_intervals(build_map(_matrix(TABLE, [9])))
    assert (point.accuracy, point.low, point.high, point.questions) == (None, None, None, 0)
    assert accuracy_intervals(build_map(_matrix({}, [1]))) == [
        accuracy_intervals(build_map(_matrix(TABLE, [9])))[0].__class__(1, None, None, None, 0)
    ]


def test_solved_means_the_same_as_in_compare() -> None:
    assert analysis.outcome_cell(0.5, 0.49) == "only A"
    pairs = flips(build_map(_matrix({"q": {1: (2, 1), 2: (4, 1)}}, [1, 2])))
    assert [f.question_id for f in pairs[0].regressions] == ["q"]


def test_the_pair_shown_first_is_the_first_with_a_flip() -> None:
    # Runs 1 and 2 agree; 3 loses the question: the second pair has the flip.
    pairs = flips(build_map(_matrix({"q": {1: (1, 1), 2: (1, 1), 3: (1, 0)}}, [1, 2, 3])))
    assert first_with_flips(pairs) == 1
    assert first_with_flips(pairs[:1]) == 0  # no pair with a flip: the first
    assert first_with_flips([]) == 0
