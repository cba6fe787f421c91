"""Where a group's reward spread comes from, counted over a run's groups."""

from __future__ import annotations

from app.dashboard.groups.signal import correctness_term, source_of, summarise
from storage.read_models import GroupKey, GroupStats


def _group(q: str, size: int, correct: int, std: float) -> GroupStats:
    return GroupStats(1, GroupKey(q), size, correct, 0.0, std, 0.0, 0.0)


def test_a_groups_source_is_correctness_shaping_or_none() -> None:
    assert source_of(_group("a", 4, 2, 0.5)) == "correctness"
    assert source_of(_group("b", 4, 0, 0.01)) == "shaping only"
    assert source_of(_group("c", 4, 4, 0.05)) == "shaping only"
    assert source_of(_group("d", 4, 0, 0.0)) == "none"
    assert source_of(_group("e", 4, 4, 0.0)) == "none"


def test_the_summary_counts_each_group_once_and_bins_stds_by_source() -> None:
    spread = [
        _group("a", 4, 2, 0.5),
        _group("b", 4, 0, 0.01),
        _group("c", 4, 4, 0.15),  # on a bin's edge: the 0.15-0.20 bin, as the store bins it
        _group("d", 4, 0, 0.06),
    ]
    summary = summarise(spread, total=7, equal_all_correct=1, equal_none_correct=2)
    assert (summary.correctness, summary.shaping_only, summary.equal) == (1, 3, 3)
    assert (summary.none_correct, summary.all_correct) == (2 + 2, 1 + 1)
    assert summary.std_bins["correctness"] == [0] * 10 + [1]
    assert summary.std_bins["shaping only"] == [1, 1, 0, 1]
    assert summary.share(summary.shaping_only) == 3 / 7
    assert summarise([], total=0, equal_all_correct=0, equal_none_correct=0).share(0) is None


def test_only_a_correct_answer_is_the_correctness_term() -> None:
    assert correctness_term("correct") == 1.0
    assert [correctness_term(o) for o in ("wrong", "budget_exhausted", "error", None)] == [0.0] * 4
