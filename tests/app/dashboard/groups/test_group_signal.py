"""A group's rewards split into what correctness and shaping give."""

from __future__ import annotations

from app.dashboard.groups.signal import correctness_term


def test_only_a_correct_answer_is_the_correctness_term() -> None:
    assert correctness_term("correct") == 1.0
    assert [correctness_term(o) for o in ("wrong", "budget_exhausted", "error", None)] == [0.0] * 4
