"""What the Training page draws: per-step curves and the training steps a question is shown at."""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def curve(
    steps: Sequence[TrainingStep],
    title: str,
    series: Sequence[tuple[str, str]],
    tickformat: str | None = None,
) -> go.Figure:
    """Lines over training steps, one per series (gaps where a step has no value)."""
    fig = go.Figure()
    xs = [s.train_step for s in steps]
    for name, attr in series:
        fig.add_scatter(name=name, x=xs, y=[getattr(s, attr) for s in steps], mode="lines+markers")
    layout = {**_LAYOUT, "title": title}
    if tickformat:
        layout["yaxis_tickformat"] = tickformat
    if tickformat == ".0%":  # a rate: its whole range, not -100%..100% around a flat 0
        layout["yaxis_range"] = [-0.02, 1.02]
    fig.update_layout(**layout)
    # Training steps are whole numbers: no 0.5 ticks on a short run.
    span = max(xs) - min(xs) if xs else 0
    fig.update_xaxes(title="training step", tick0=0, dtick=max(1, math.ceil(span / _MAX_TICKS)))
    return fig


def shown_steps(episodes: Sequence[TrainingEpisode]) -> list[int]:
    """The first, a middle and the last training step at which a question was played."""
    played = sorted({e.train_step for e in episodes})
    if len(played) <= 3:
        return played
    return [played[0], played[len(played) // 2], played[-1]]


def at_step(episodes: Sequence[TrainingEpisode], step: int) -> list[TrainingEpisode]:
    """A question's episodes at one training step, in group and sample order."""
    return [e for e in episodes if e.train_step == step]
