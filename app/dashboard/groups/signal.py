"""A GRPO group's rewards and advantages split into what the answer's correctness gives and
what the shaping terms give, and the names of the sources of a spread.

An episode's reward is its answer's term (`rewards.ANSWER_CORRECT` or `ANSWER_WRONG`) plus
shaping: QUERY progress rewards and error penalties (`rollout_core.rewards`). Which source a
group's spread has is `rollout_core.grpo.signal_source`'s to say (the store counts by it too).
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout_core import grpo, rewards
from rollout_core.grpo import SignalSource
from rollout_core.records import Outcome
from storage.read_models import GroupDetail, RunSummary

SOURCE_LABELS: dict[SignalSource, str] = {
    "correctness": "correctness",
    "shaping only": "shaping only",
    "none": "none: no advantage",
}


def shaping_terms(run: RunSummary) -> str:
    """What a run's rewards hold beside correctness: rollscope's shaping, or, for a run it did
    not play, the trainer's own other terms."""
    if run.played_here:
        return "QUERY progress rewards and error penalties"
    return "the trainer's reward terms other than correctness (a format reward, partial credit)"


TRAINER_TERMS = "the trainer's reward terms other than correctness (shaping, a format reward)"
"""What a trainer's advantages beside correctness come from, where it reported them."""


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
