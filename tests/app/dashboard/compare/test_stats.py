"""Compare's numbers: one accuracy difference per run, one definition of a difference."""

from __future__ import annotations

import pytest

from app.dashboard.compare import stats
from storage.read_models import QuestionOutcomes, RunCell


def _row(qid: str, **cells: tuple[int, int]) -> QuestionOutcomes:
    """A question's cells: run `r1=(episodes, correct)`."""
    return QuestionOutcomes(
        qid, {int(k[1:]): RunCell(int(k[1:]), n, c, []) for k, (n, c) in cells.items()}
    )


ROWS = [
    _row("a", r1=(12, 10), r2=(1, 1)),  # 0.83 and 1: both solve it
    _row("b", r1=(2, 0), r2=(1, 1)),  # only run 2 solves it
    _row("c", r1=(4, 2)),  # run 1 alone
]


def test_the_delta_is_the_intervals_centre_and_each_question_counts_once() -> None:
    pair = stats.pairing(ROWS, 1, 2)
    assert pair.questions == 2
    assert pair.base == pytest.approx((10 / 12 + 0) / 2)  # not 10/14, pooled over episodes
    assert pair.run == 1.0
    assert pair.interval is not None and pair.delta == pair.interval.diff
    assert pair.delta == pytest.approx(1.0 - (10 / 12) / 2)


def test_runs_differ_where_one_solves_the_question_and_another_not() -> None:
    assert [stats.runs_differ(r, [1, 2]) for r in ROWS] == [False, True, False]
    assert stats.solved(ROWS[2], 2) is None


def test_the_questions_all_runs_played_come_first() -> None:
    rows = [ROWS[2], ROWS[0], ROWS[1]]
    assert [r.question_id for r in stats.shared_first(rows, [1, 2])] == ["a", "b", "c"]


def test_runs_sharing_no_question_have_no_delta() -> None:
    pair = stats.pairing([_row("a", r1=(1, 1)), _row("b", r2=(1, 0))], 1, 2)
    assert pair.questions == 0 and pair.delta is None and pair.base is None
