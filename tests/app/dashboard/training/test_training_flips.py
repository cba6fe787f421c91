"""Which questions flipped between the first and the last training step that drew them."""

from __future__ import annotations

from app.dashboard.training.flips import flips_of
from storage.training import DrawnQuestion, TrainingStep


def _step(n: int, *drawn: tuple[str, int, int]) -> TrainingStep:
    """A training step that drew these (question, correct, samples)."""
    return TrainingStep(
        train_step=n, episodes=sum(k for *_, k in drawn), groups=len(drawn), accuracy=0.0,
        reward=0.0, reward_std=None, group_reward_std=None, frac_reward_zero_std=0.0,
        unparsed_rate=None, mean_steps=1.0, mean_logprob=None, mean_tokens=None,
        drawn=tuple(DrawnQuestion(*d) for d in drawn),
    )  # fmt: skip


def test_flips_compare_a_questions_first_and_last_step() -> None:
    steps = [
        _step(0, ("learnt", 0, 4), ("steady", 4, 4), ("pooled", 4, 4)),
        _step(1, ("forgot", 2, 4)),  # half right: right, as on Compare and the map
        _step(2, ("forgot", 4, 4)),
        _step(3, ("steady", 3, 4)),
        _step(4, ("once", 4, 4)),  # drawn at one step only: it cannot flip
        _step(5, ("learnt", 3, 4)),
        _step(6, ("pooled", 3, 8)),  # two groups of it at this step, counted by the store
        _step(9, ("forgot", 1, 4)),
    ]
    found = flips_of(steps)
    assert found.questions == 4
    assert [(f.question_id, f.first_step, f.last_step) for f in found.to_right] == [
        ("learnt", 0, 5)
    ]
    # The largest change first: pooled 4/4 -> 3/8, forgot 2/4 -> 1/4.
    assert [f.question_id for f in found.to_wrong] == ["pooled", "forgot"]
    pooled = found.to_wrong[0]
    assert (pooled.last_correct, pooled.last_samples) == (3, 8)
    # Texts come after, for the flipped questions alone.
    assert found.question_ids == ["pooled", "forgot", "learnt"]
    named = found.with_texts({"learnt": "What was learnt?"})
    assert named.to_right[0].question == "What was learnt?"
    assert [f.question for f in named.to_wrong] == ["", ""]


def test_a_run_that_drew_each_question_once_has_nothing_to_flip() -> None:
    found = flips_of([_step(0, ("q", 2, 4)), _step(1, ("r", 0, 4))])
    assert (found.questions, found.to_wrong, found.to_right) == (0, [], [])
