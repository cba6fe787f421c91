"""Replay's reward chart: each step's reward and the running total."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.render import action_label
from storage.read_models import StoredStep

_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 40}


def reward_timeline(steps: Sequence[StoredStep], current: int | None = None) -> go.Figure:
    """Reward of each step, with the running total, the current step marked."""
    xs = [s.step_no for s in steps]
    rewards = [s.reward for s in steps]
    total, running = 0.0, []
    for r in rewards:
        total += r
        running.append(total)
    fig = go.Figure()
    fig.add_bar(name="step reward", x=xs, y=rewards, text=[action_label(s) for s in steps])
    fig.add_scatter(name="cumulative", x=xs, y=running, mode="lines+markers")
    if current is not None:
        fig.add_vline(x=current, line_dash="dot", line_color="gray")
    fig.update_layout(
        title="Reward per step", xaxis_title="step", xaxis_dtick=1, height=260, margin=_MARGIN
    )
    return fig
