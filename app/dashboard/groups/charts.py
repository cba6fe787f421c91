"""Figures of the GRPO groups view: the groups' reward std by source, and a group's samples'
confidence per step in their run's colour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from app.dashboard.components.colors import run_color
from app.dashboard.components.confidence import confidence_chart
from app.dashboard.groups.signal import SOURCE_LABELS
from rollout_core.grpo import SignalSource
from storage.groups import STD_BIN
from storage.read_models import StoredStep

# Grey for no signal, blue for the signal GRPO is meant to learn from, orange for the one it
# should not trust: a colour-blind reader tells blue from orange.
SOURCE_COLORS: dict[SignalSource, str] = {
    "correctness": "#0072B2",
    "shaping only": "#E69F00",
    "none": "#9e9e9e",
}
# Samples of one group share their run's colour; they differ by dash and marker instead.
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "pentagon")


def std_histogram(equal: int, bins: Mapping[SignalSource, Sequence[int]]) -> go.Figure:
    """The groups by reward std: `equal` ones at std 0 on their own, the others stacked by
    source, in bins of `STD_BIN` from 0."""
    fig = go.Figure()
    # Groups GRPO learns nothing from (all rewards equal, or every advantage the trainer gave
    # 0) stand apart from small but non-zero stds in their bin.
    fig.add_bar(
        x=[STD_BIN / 2],
        y=[equal],
        name=SOURCE_LABELS["none"],
        marker_color=SOURCE_COLORS["none"],
        hovertemplate="no advantage: %{y:,} groups<extra></extra>",
    )
    for source, counts in bins.items():
        starts = [i * STD_BIN for i in range(len(counts))]
        fig.add_bar(
            x=[s + STD_BIN / 2 for s in starts],
            y=list(counts),
            name=SOURCE_LABELS[source],
            customdata=[(s, s + STD_BIN) for s in starts],
            hovertemplate=f"std %{{customdata[0]:.2f}}-%{{customdata[1]:.2f}}, {source}: "
            "%{y:,} groups<extra></extra>",
            marker_color=SOURCE_COLORS[source],
        )
    fig.update_traces(width=STD_BIN * 0.95)
    fig.update_layout(
        title="Reward standard deviation of the groups, by source",
        xaxis_title="group reward std (0: no learning signal)",
        yaxis_title="groups",
        barmode="stack",
        height=320,
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
    )
    fig.update_xaxes(rangemode="tozero")
    return fig


def group_confidence(run_id: int, samples: Sequence[tuple[str, Sequence[StoredStep]]]) -> go.Figure:
    """The samples' confidence per step (`confidence_chart`), every line in the run's colour."""
    fig = confidence_chart(samples)
    color = run_color(run_id)
    order = {name: i for i, (name, _) in enumerate(samples)}
    for trace in fig.data:
        i = order.get(str(trace.legendgroup), 0)
        trace.update(
            line={"color": color, "dash": _DASHES[i % len(_DASHES)]},
            marker={"color": color, "symbol": _SYMBOLS[i % len(_SYMBOLS)], "size": 8},
        )
    return fig
