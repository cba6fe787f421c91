"""The demo's training questions: those its checkpoint solves some of the time come first."""

from __future__ import annotations

from app.demo.solvable import Solved, sometimes_solved


def solved(qid: str, correct: int, reward: float | None = None, episodes: int = 4) -> Solved:
    return Solved(qid, correct, episodes, correct / episodes if reward is None else reward)


def test_questions_solved_about_half_the_time_come_first() -> None:
    found = [
        solved("never", 0),
        solved("once", 1),
        solved("always", 4),
        solved("twice", 2),
        solved("thrice", 3),
    ]
    assert sometimes_solved(found, 3) == ["twice", "thrice", "once"]


def test_ties_go_to_the_higher_reward_then_to_dataset_order() -> None:
    found = [
        solved("a", 1, reward=0.25),
        solved("b", 3, reward=0.80),
        solved("c", 1, reward=0.25),
    ]
    assert sometimes_solved(found, 3) == ["b", "a", "c"]


def test_too_few_mixed_questions_are_filled_up_with_the_rest() -> None:
    # A checkpoint that solves almost nothing still gets a run of the size asked for; among the
    # never-solved, those whose queries came closer to the gold rows go first.
    found = [
        solved("never", 0, reward=-0.02),
        solved("close", 0, reward=0.06),
        solved("once", 1),
    ]
    assert sometimes_solved(found, 2) == ["once", "close"]
    assert sometimes_solved(found, 5) == ["once", "close", "never"]
