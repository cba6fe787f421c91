"""GRPO's group statistics: the mean, the standard deviation and each sample's advantage.

As TRL's GRPOTrainer computes them: the standard deviation is the sample one (n - 1, torch's
`std` default), and advantage = (reward - mean) / (std + ADVANTAGE_EPSILON). A group whose
rewards are all equal has std 0 and gives every member advantage 0: no learning signal. A
group of one sample has no standard deviation (torch returns NaN); it counts as std 0 here.

Where a group's spread comes from (`signal_source`) is decided here alone, for the store's
counts and the dashboard's labels alike. Where the trainer reported the advantages it gave
(TRL's completions files, a recorded TRL run, a Recorder's `advantage=`), they decide whether
the group moved the policy: the trainer's reward can be other than the episode's (a run that
trains on correctness alone, while rollscope's environment adds shaping).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

ADVANTAGE_EPSILON = 1e-4
"""Added to the std before dividing (TRL's constant), so a zero-variance group divides by it."""


NO_ADVANTAGE = 1e-3
"""A trainer's advantage this close to 0 is none: the trainer's float32 mean of equal rewards
can miss them by a rounding error, which the division by (std + eps) makes about 1e-5."""


SignalSource = Literal["correctness", "shaping only", "none"]
"""What makes a group's rewards differ: right and wrong answers; the shaping terms alone
(`rollout_core.rewards`: QUERY progress, error penalties) with every sample right or every one
not; nothing (all rewards equal, every advantage 0)."""
SIGNAL_SOURCES: tuple[SignalSource, ...] = ("correctness", "shaping only", "none")


def signal_source(
    size: int, correct: int, std: float, trainer_advantage: float | None = None
) -> SignalSource:
    """Where the spread of a group of `size` samples, `correct` of them right, with reward
    std `std` comes from. Shaping alone still moves the policy: GRPO divides by (std + eps),
    so penalties of a hundredth become advantages as large as a right answer's.

    `trainer_advantage`, the largest |advantage| the trainer gave a sample where it reported
    one for each, decides instead of `std` whether there is any spread: that is what the
    trainer learned from."""
    flat = std == 0.0 if trainer_advantage is None else trainer_advantage <= NO_ADVANTAGE
    if flat:
        return "none"
    return "correctness" if 0 < correct < size else "shaping only"


def group_mean(rewards: Sequence[float]) -> float:
    """The mean reward of a group (0.0 for an empty one)."""
    if not rewards:
        return 0.0
    try:
        return math.fsum(rewards) / len(rewards)
    except OverflowError:  # rewards near the float's limit: their sum is past it, not the mean
        scale = max(abs(r) for r in rewards)
        return scale * (math.fsum(r / scale for r in rewards) / len(rewards))


def group_std(rewards: Sequence[float]) -> float:
    """The sample standard deviation (n - 1); 0.0 for fewer than two rewards or equal ones."""
    n = len(rewards)
    if n < 2 or min(rewards) == max(rewards):
        return 0.0
    mean = group_mean(rewards)
    deviations = [r - mean for r in rewards]
    squares = math.fsum(d * d for d in deviations)
    if math.isfinite(squares):
        return math.sqrt(squares / (n - 1))
    # Rewards too large to square (past about 1e154): the same std, in units of the largest.
    scale = max(abs(d) for d in deviations)
    return scale * math.sqrt(math.fsum((d / scale) * (d / scale) for d in deviations) / (n - 1))


def std_from_sums(n: int, total: float, total_sq: float, lowest: float, highest: float) -> float:
    """The sample standard deviation from SQL aggregates (count, sum, sum of squares, min, max).

    Equal rewards give exactly 0 (decided by min == max, not by the subtraction, whose
    rounding would leave ~1e-8 behind). Rewards that differ but are so large that their sums
    overflow a float leave no std to compute from them: inf (the subtraction would give NaN,
    which max() takes for 0, no spread).
    """
    if n < 2 or lowest == highest:
        return 0.0
    if not (math.isfinite(total_sq) and math.isfinite(total * total)):
        return math.inf
    variance = (total_sq - total * total / n) / (n - 1)
    return math.sqrt(max(0.0, variance))


def advantages(rewards: Sequence[float]) -> list[float]:
    """Each reward's GRPO advantage within its group, in the order given."""
    std = group_std(rewards)
    if std == 0.0:  # exactly 0, not (r - mean) / 1e-4 with the mean's last-bit rounding
        return [0.0] * len(rewards)
    mean = group_mean(rewards)
    return [(r - mean) / (std + ADVANTAGE_EPSILON) for r in rewards]
