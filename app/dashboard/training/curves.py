"""The Training page's numbers: per-step metrics as points (long runs averaged), what each
point's steps drew, a smoothed trend, and the training steps a question is shown at."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rollout_core.grpo import SIGNAL_SOURCES, SignalSource
from storage.training import DrawnQuestion, NamedRewardStep, TrainingEpisode, TrainingStep

MAX_POINTS = 1000
"""Points a curve draws at most: a browser draws a long run's every step slowly, if at all."""
DRAWN_LISTED = 6
"""Questions a point's hover names; more are counted."""

# Averaged over the steps in a point, weighted by their groups; the others by their episodes.
_BY_GROUPS = frozenset({"group_reward_std", "frac_reward_zero_std"})
_AVERAGED = (
    "accuracy",
    "reward",
    "reward_std",
    "group_reward_std",
    "frac_reward_zero_std",
    "unparsed_rate",
    "mean_steps",
    "mean_logprob",
    "mean_tokens",
)


@dataclass(frozen=True, slots=True)
class Curves:
    """A training run's per-step metrics as the Training page draws them."""

    steps: int
    """Training steps with a finished episode."""
    last: TrainingStep | None
    """The last of them, as it is (not averaged)."""
    points: list[TrainingStep]
    """The steps, or when there are more than `MAX_POINTS`, runs of `per_point` consecutive
    steps, each averaged into one at its last step."""
    per_point: int
    firsts: list[int]
    """Each point's first training step (its own step when `per_point` is 1)."""
    drawn: list[str]
    """Each point's questions in words: which the steps drew, and how many samples were
    correct."""

    @property
    def sources(self) -> list[dict[SignalSource, int]]:
        """Each point's groups counted by where their reward spread comes from."""
        return [p.by_source for p in self.points]


def curves_of(steps: Sequence[TrainingStep], max_points: int = MAX_POINTS) -> Curves:
    """The steps to draw, all of them or runs of consecutive steps averaged, each with the
    questions it drew in words."""
    per_point = max(1, math.ceil(len(steps) / max_points))
    points = [
        steps[i] if per_point == 1 else _averaged(steps[i : i + per_point])
        for i in range(0, len(steps), per_point)
    ]
    firsts = [steps[i].train_step for i in range(0, len(steps), per_point)]
    drawn = [_drawn_text(p.drawn) for p in points]
    return Curves(len(steps), steps[-1] if steps else None, points, per_point, firsts, drawn)


def named_reward_points(
    curves: Curves, steps: Sequence[NamedRewardStep]
) -> dict[str, list[float | None]]:
    """Each named reward's mean at each of the curves' points, over the point's steps
    weighted by their episodes; None where those steps hold none of it. `steps` in step
    order; a step the curves do not hold yet (a live run read a moment apart) is left out."""
    lasts = [p.train_step for p in curves.points]
    sums: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    i = 0
    for s in steps:
        while i < len(lasts) and s.train_step > lasts[i]:
            i += 1
        if i == len(lasts):
            break
        if s.train_step < curves.firsts[i]:
            continue
        sums.setdefault(s.name, [0.0] * len(lasts))[i] += s.total
        counts.setdefault(s.name, [0] * len(lasts))[i] += s.episodes
    return {
        name: [t / n if n else None for t, n in zip(sums[name], counts[name], strict=True)]
        for name in sorted(sums)
    }


def adds_to_reward(curves: Curves, rewards: dict[str, list[float | None]]) -> bool:
    """Whether the named rewards say more than the mean episode reward: there are several, or
    the one differs from it at a point. A file whose one reward column is the episode's reward
    (a TRL log trained on one function) would draw the Reward chart again."""
    if len(rewards) != 1:
        return bool(rewards)
    (values,) = rewards.values()
    return any(
        v is None or not math.isclose(v, p.reward, abs_tol=1e-9)
        for v, p in zip(values, curves.points, strict=True)
    )


def steps_of_points(curves: Curves, low: float, high: float) -> tuple[int, int] | None:
    """The first and last training step of the points drawn between x `low` and `high` (a
    range dragged across a chart), each point's steps whole; None when no point is there."""
    low, high = min(low, high), max(low, high)
    inside = [i for i, p in enumerate(curves.points) if low <= p.train_step <= high]
    if not inside:
        return None
    return curves.firsts[inside[0]], curves.points[inside[-1]].train_step


def _drawn_text(drawn: Sequence[DrawnQuestion]) -> str:
    """'q-3 2/4 correct, q-7 0/4' for a point's questions, most played first."""
    ranked = sorted(drawn, key=lambda d: (-d.episodes, d.question_id))
    parts = [
        f"{d.question_id} {d.correct}/{d.episodes}" + (" correct" if i == 0 else "")
        for i, d in enumerate(ranked[:DRAWN_LISTED])
    ]
    more = len(ranked) - DRAWN_LISTED
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _averaged(run: Sequence[TrainingStep]) -> TrainingStep:
    """One point for consecutive steps: at the last step, with their counts summed (groups
    by source, the questions drawn) and each metric their weighted mean (None where no step
    has a value)."""
    values: dict[str, float | None] = {}
    for attr in _AVERAGED:
        pairs = [
            (getattr(s, attr), s.groups if attr in _BY_GROUPS else s.episodes)
            for s in run
            if getattr(s, attr) is not None
        ]
        weight = sum(w for _, w in pairs)
        values[attr] = sum(v * w for v, w in pairs) / weight if weight else None
    drawn: dict[str, list[int]] = {}
    for s in run:
        for d in s.drawn:
            counts = drawn.setdefault(d.question_id, [0, 0])
            counts[0] += d.correct
            counts[1] += d.episodes
    return TrainingStep(
        train_step=run[-1].train_step,
        episodes=sum(s.episodes for s in run),
        groups=sum(s.groups for s in run),
        **values,  # type: ignore[arg-type]
        by_source={k: sum(s.by_source[k] for s in run) for k in SIGNAL_SOURCES},
        drawn=tuple(DrawnQuestion(q, c, n) for q, (c, n) in drawn.items()),
    )


def step_ranges(steps: Sequence[int]) -> str:
    """Ascending steps as runs of consecutive ones: 3–5, 8."""
    parts: list[str] = []
    start = prev = None
    for step in [*steps, None]:
        if step is not None and prev is not None and step == prev + 1:
            prev = step
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}–{prev}")
        start = prev = step
    return ", ".join(parts)


def trend_window(points: int) -> int:
    """Points a trend averages: a tenth of the curve, at least 3 (at most the curve)."""
    return max(1, min(points, max(3, points // 10)))


def trend(
    values: Sequence[float | None], weights: Sequence[int], window: int
) -> list[float | None]:
    """Each point's trailing mean over `window` points (its own included), weighted by
    `weights` (episodes); None where the window holds no value. A value past a float's range
    (inf) is left out, as the chart leaves its point out: kept, it would make the whole
    window inf or NaN, and the trend would vanish over `window` points."""
    out: list[float | None] = []
    for i in range(len(values)):
        lo = max(0, i - window + 1)
        pairs = [
            (v, w)
            for v, w in zip(values[lo : i + 1], weights[lo : i + 1], strict=True)
            if v is not None and math.isfinite(v)
        ]
        total = sum(w for _, w in pairs)
        if not total:
            out.append(None)
            continue
        # Taken as offsets from the window's first value, the mean of equal values is that
        # value exactly; a plain weighted sum can land a bit off it, and a chart zooms in.
        base = pairs[0][0]
        out.append(base + sum((v - base) * w for v, w in pairs) / total)
    return out


def shown_steps(played: Sequence[int]) -> list[int]:
    """The first, a middle and the last of the training steps a question was played at
    (`played`, in order)."""
    if len(played) <= 3:
        return list(played)
    return [played[0], played[len(played) // 2], played[-1]]


def at_step(episodes: Sequence[TrainingEpisode], step: int) -> list[TrainingEpisode]:
    """A question's episodes at one training step, in group and sample order."""
    return [e for e in episodes if e.train_step == step]
