"""Per-step confidence of episodes side by side: mean token log-probability and entropy."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.render import action_label
from storage.read_models import StoredStep

_UNCOLORED = "#737373"
"""A line whose run was not given: never a colour by position, which would read as a run."""


def has_confidence(steps: Sequence[StoredStep]) -> bool:
    """Whether any step recorded its tokens' log-probabilities or entropies."""
    return any(s.mean_logprob is not None or s.mean_entropy is not None for s in steps)


def confidence_chart(
    episodes: Sequence[tuple[str, Sequence[StoredStep]]],
    current: int | None = None,
    *,
    colors: Sequence[str] = (),
) -> go.Figure:
    """Mean log-prob (top) and mean entropy (bottom) per step, one line per episode; steps
    without recorded tokens are gaps. `colors`: each episode's line colour, its run's
    (`colors.run_color`); without them every line is grey, told apart by its legend."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("mean token log-probability", "mean token entropy (nats)"),
    )
    for i, (name, steps) in enumerate(episodes):
        xs = [s.step_no for s in steps]
        color = colors[i] if i < len(colors) else _UNCOLORED
        fig.add_scatter(
            x=xs,
            y=[s.mean_logprob for s in steps],
            name=name,
            legendgroup=name,
            mode="lines+markers",
            line_color=color,
            text=[action_label(s) for s in steps],
            hovertemplate="step %{x} · %{text}<br>mean log-prob %{y:.3f}<extra>%{fullData.name}"
            "</extra>",
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=xs,
            y=[s.mean_entropy for s in steps],
            name=name,
            legendgroup=name,
            showlegend=False,
            mode="lines+markers",
            line_color=color,
            line_dash="dot",
            text=[action_label(s) for s in steps],
            hovertemplate="step %{x} · %{text}<br>mean entropy %{y:.3f}<extra>%{fullData.name}"
            "</extra>",
            row=2,
            col=1,
        )
    if current is not None:
        fig.add_vline(x=current, line_dash="dot", line_color="gray")
    fig.update_xaxes(dtick=1, title_text="step", row=2, col=1)
    fig.update_layout(
        title="Confidence per step", height=380, margin={"l": 40, "r": 10, "t": 60, "b": 40}
    )
    return fig
