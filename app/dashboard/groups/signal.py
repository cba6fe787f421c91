"""Where a GRPO group's reward spread comes from: the answer's correctness or the shaping terms.

An episode's reward is its answer's term (`rewards.ANSWER_CORRECT` or `ANSWER_WRONG`) plus
shaping: QUERY progress rewards and error penalties (`rollout_core.rewards`). A group whose
samples are all wrong (or all right) can still differ by shaping alone, and GRPO divides by
(std + 1e-4), so penalties of -0.01 become advantages as large as a right answer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rollout_core import grpo, rewards
from rollout_core.records import Outcome
from storage.groups import STD_BIN
from storage.read_models import GroupDetail, GroupStats

Source = Literal["correctness", "shaping only", "none"]
"""What makes a group's rewards differ: right and wrong answers; shaping terms alone (every
sample right, or every one not); nothing (all rewards equal, every advantage 0)."""
SOURCES: tuple[Source, ...] = ("correctness", "shaping only", "none")
SOURCE_LABELS: dict[str, str] = {
    "correctness": "correctness",
    "shaping only": "shaping only",
    "none": "none: all rewards equal",
}


def source_of(stats: GroupStats) -> Source:
    """Where the group's reward spread comes from."""
    if stats.std == 0.0:
        return "none"
    return "correctness" if 0 < stats.correct < stats.size else "shaping only"


@dataclass(frozen=True, slots=True)
class SignalSummary:
    """A run's groups counted by the source of their spread, each count named for what it is."""

    total: int
    correctness: int
    """Groups with right and wrong samples."""
    shaping_only: int
    """Groups whose rewards differ although every sample is right, or every one is not."""
    equal: int
    """Groups whose rewards are all equal (std 0): no learning signal."""
    none_correct: int
    """Groups without a right sample, whatever their rewards."""
    all_correct: int
    """Groups whose samples are all right, whatever their rewards."""
    std_bins: dict[str, list[int]] = field(default_factory=dict)
    """Groups with a spread by reward std, in bins of `STD_BIN` from 0, per source."""

    def share(self, count: int) -> float | None:
        """`count` as a share of the run's groups; None without groups."""
        return count / self.total if self.total else None


def summarise(
    spread: Sequence[GroupStats], *, total: int, equal_all_correct: int, equal_none_correct: int
) -> SignalSummary:
    """The summary of a run from every group with a spread (std > 0) and the counts of those
    without (`total` groups in all; of the equal ones, how many are all right or none right)."""
    counts = {"correctness": 0, "shaping only": 0}
    bins: dict[str, list[int]] = {"correctness": [], "shaping only": []}
    none_correct, all_correct = equal_none_correct, equal_all_correct
    for g in spread:
        source = source_of(g)
        if source == "none":
            continue
        counts[source] += 1
        none_correct += g.correct == 0
        all_correct += g.correct == g.size
        # The bin the std falls in (the tiny offset keeps 0.15 out of the 0.10-0.15 bin), as
        # the store bins them.
        b = int(g.std / STD_BIN + 1e-9)
        row = bins[source]
        row.extend([0] * (b + 1 - len(row)))
        row[b] += 1
    return SignalSummary(
        total=total,
        correctness=counts["correctness"],
        shaping_only=counts["shaping only"],
        equal=total - counts["correctness"] - counts["shaping only"],
        none_correct=none_correct,
        all_correct=all_correct,
        std_bins=bins,
    )


def correctness_term(outcome: Outcome | None) -> float:
    """The part of an episode's reward its answer's correctness gives."""
    return rewards.ANSWER_CORRECT if outcome == "correct" else rewards.ANSWER_WRONG


@dataclass(frozen=True, slots=True)
class MemberSplit:
    """One sample's reward and GRPO advantage, each split into correctness and shaping."""

    correctness: float
    shaping: float
    advantage_correctness: float
    advantage_shaping: float


def split_members(group: GroupDetail) -> list[MemberSplit]:
    """Each member's reward and advantage split in two: the advantage is linear in the
    reward, so (c - mean c) / (std + eps) and (s - mean s) / (std + eps) sum to it."""
    terms = [
        (correctness_term(m.detail.summary.outcome), m.detail.summary.reward or 0.0)
        for m in group.members
    ]
    parts = [(c, r - c) for c, r in terms]
    std = group.stats.std
    if std == 0.0:  # every advantage is exactly 0
        return [MemberSplit(c, s, 0.0, 0.0) for c, s in parts]
    scale = std + grpo.ADVANTAGE_EPSILON
    mean_c = grpo.group_mean([c for c, _ in parts])
    mean_s = grpo.group_mean([s for _, s in parts])
    return [MemberSplit(c, s, (c - mean_c) / scale, (s - mean_s) / scale) for c, s in parts]


def spread_stds(group: GroupDetail) -> tuple[float, float]:
    """The std of the members' correctness terms and of their shaping terms."""
    split = split_members(group)
    return (
        grpo.group_std([m.correctness for m in split]),
        grpo.group_std([m.shaping for m in split]),
    )
