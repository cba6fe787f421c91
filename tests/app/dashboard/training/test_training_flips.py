"""Which questions flipped between the first and the last training step that drew them."""

from __future__ import annotations

from app.dashboard.training.flips import flips_of
from storage.read_models import GroupKey, GroupStats


def _group(q: str, step: int, size: int, correct: int, index: int = 0) -> GroupStats:
    return GroupStats(1, GroupKey(q, index, step), size, correct, 0.0, 0.0, 0.0, 0.0)


def test_flips_compare_a_questions_first_and_last_step() -> None:
    groups = [
        _group("learnt", 0, 4, 0),
        _group("learnt", 5, 4, 3),
        _group("forgot", 1, 4, 2),  # half right: right, as on Compare and the map
        _group("forgot", 2, 4, 4),
        _group("forgot", 9, 4, 1),
        _group("steady", 0, 4, 4),
        _group("steady", 3, 4, 3),
        _group("once", 4, 4, 4),  # drawn at one step only: it cannot flip
        # Two groups of one question at one step are counted together: 1 + 2 of 8.
        _group("pooled", 0, 4, 4),
        _group("pooled", 6, 4, 1, index=1),
        _group("pooled", 6, 4, 2, index=2),
    ]
    found = flips_of(groups, {"learnt": "What was learnt?"})
    assert found.questions == 4
    assert [(f.question_id, f.first_step, f.last_step) for f in found.to_right] == [
        ("learnt", 0, 5)
    ]
    assert found.to_right[0].question == "What was learnt?"
    # The largest change first: pooled 4/4 -> 3/8, forgot 2/4 -> 1/4.
    assert [f.question_id for f in found.to_wrong] == ["pooled", "forgot"]
    pooled = found.to_wrong[0]
    assert (pooled.last_correct, pooled.last_samples) == (3, 8)


def test_a_batch_runs_groups_have_no_steps_to_flip_between() -> None:
    batch = GroupStats(1, GroupKey("q"), 4, 2, 0.0, 0.0, 0.0, 0.0)
    assert flips_of([batch], {}).questions == 0
