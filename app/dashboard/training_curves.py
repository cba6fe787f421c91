"""What the Training page draws: per-step curves and the training steps a question is shown at."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from storage.training import TrainingEpisode, TrainingStep

# The legend sits under the plot, so that a half-width chart keeps its width on a narrow
# screen (at 800 px a legend on the right took half of it).
_LAYOUT = {
    "margin": {"l": 40, "r": 10, "t": 40, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0},
}
_MAX_TICKS = 10

# (title, [(series name as TRL logs it, attribute)], y-axis format)
CURVES: tuple[tuple[str, tuple[tuple[str, str], ...], str | None], ...] = (
    ("Reward and accuracy", (("reward", "reward"), ("accuracy", "accuracy")), None),
    (
        "Learning signal",
        (
            ("reward_std", "reward_std"),
            ("reward std within groups", "group_reward_std"),
            ("frac_reward_zero_std", "frac_reward_zero_std"),
        ),
        None,
    ),
    ("Unparsed outputs", (("unparsed rate", "unparsed_rate"),), ".0%"),
    ("Steps per episode", (("mean steps", "mean_steps"),), None),
    ("Token log-probability", (("mean token log-prob", "mean_logprob"),), None),
    ("Model tokens per episode", (("completions/mean_length", "mean_tokens"),), None),
)


MAX_POINTS = 1000
"""Points a curve draws at most. A run of 32k steps drew 32k markers a series, 400k in all on
the page: the browser took over a minute to draw them, and serialising them took 2.5 s."""
_MARKERS_UP_TO = 200
"""Points a curve marks each of; more are drawn as a line alone."""

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


def curves_of(steps: Sequence[TrainingStep], max_points: int = MAX_POINTS) -> Curves:
    """The steps to draw: all of them, or runs of consecutive steps averaged."""
    per_point = max(1, math.ceil(len(steps) / max_points))
    points = [
        steps[i] if per_point == 1 else _averaged(steps[i : i + per_point])
        for i in range(0, len(steps), per_point)
    ]
    firsts = [steps[i].train_step for i in range(0, len(steps), per_point)]
    return Curves(len(steps), steps[-1] if steps else None, points, per_point, firsts)


def _averaged(run: Sequence[TrainingStep]) -> TrainingStep:
    """One point for consecutive steps: at the last step, with their counts summed and each
    metric their weighted mean (None where no step has a value)."""
    values: dict[str, float | None] = {}
    for attr in _AVERAGED:
        pairs = [
            (getattr(s, attr), s.groups if attr in _BY_GROUPS else s.episodes)
            for s in run
            if getattr(s, attr) is not None
        ]
        weight = sum(w for _, w in pairs)
        values[attr] = sum(v * w for v, w in pairs) / weight if weight else None
    return TrainingStep(
        train_step=run[-1].train_step,
        episodes=sum(s.episodes for s in run),
        groups=sum(s.groups for s in run),
        **values,  # type: ignore[arg-type]
    )


def curve(
    curves: Curves,
    title: str,
    series: Sequence[tuple[str, str]],
    tickformat: str | None = None,
) -> go.Figure:
    """Lines over training steps, one per series (gaps where a step has no value)."""
    fig = go.Figure()
    points = curves.points
    xs = [s.train_step for s in points]
    mode = "lines+markers" if len(points) <= _MARKERS_UP_TO else "lines"
    for name, attr in series:
        trace = {"name": name, "x": xs, "y": [getattr(s, attr) for s in points], "mode": mode}
        if curves.per_point > 1:
            trace["customdata"] = curves.firsts
            trace["hovertemplate"] = (
                f"{name}: %{{y:.3g}}<br>steps %{{customdata}}-%{{x}} (mean)<extra></extra>"
            )
        fig.add_scatter(**trace)
    layout = {**_LAYOUT, "title": title}
    if tickformat:
        layout["yaxis_tickformat"] = tickformat
    if tickformat == ".0%":  # a rate: its whole range, not -100%..100% around a flat 0
        layout["yaxis_range"] = [-0.02, 1.02]
    fig.update_layout(**layout)
    # Training steps are whole numbers: no 0.5 ticks on a short run. A longer one keeps
    # plotly's round ticks (forced to a tenth of the span, they read 3202, 6404, ...).
    span = max(xs) - min(xs) if xs else 0
    fig.update_xaxes(title="training step", tickformat="d")
    if span <= _MAX_TICKS:
        fig.update_xaxes(tick0=0, dtick=1)
    return fig


def shown_steps(played: Sequence[int]) -> list[int]:
    """The first, a middle and the last of the training steps a question was played at
    (`played`, in order)."""
    if len(played) <= 3:
        return list(played)
    return [played[0], played[len(played) // 2], played[-1]]


def at_step(episodes: Sequence[TrainingEpisode], step: int) -> list[TrainingEpisode]:
    """A question's episodes at one training step, in group and sample order."""
    return [e for e in episodes if e.train_step == step]
