"""Figures of the GRPO groups view: the groups' reward std by source, and a group's samples'
confidence per step in their run's colour."""

from __future__ import annotations

import math
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


NO_ADVANTAGE = "no advantage"
"""The histogram's first bar: the groups GRPO learns nothing from, apart from every std bin."""
TOO_LARGE = "too large"
"""The histogram's last bar: the groups whose std is too large to compute, past every bin."""


def std_bin_label(index: int, width: float = STD_BIN) -> str:
    """A std bin's category on the axis, its ends with as many decimals as its round width
    needs: `0.05–0.10`, `2,000–4,000`; `1e+05–2e+05` from a width of 100,000."""
    low, high = index * width, (index + 1) * width
    if width >= 1e4:
        return f"{low:.3g}–{high:.3g}"  # a bin count times 1, 2 or 5: three digits at most
    decimals = max(0, -math.floor(math.log10(width)))
    return f"{low:,.{decimals}f}–{high:,.{decimals}f}"


def std_histogram(
    none: int,
    bins: Mapping[SignalSource, Sequence[int]],
    width: float,
    beyond: Mapping[SignalSource, int],
) -> go.Figure:
    """The groups by reward std: the `none` without advantage in a bar of their own, first, the
    others stacked by source in bins `width` wide from 0, and those whose std is too large to
    compute (`beyond`, by source) in a bar of their own, last."""
    fig = go.Figure()
    # A bar of its own, not stacked in the first bin: there a group whose rewards differ by a
    # hundredth (shaping noise GRPO scales up) looked like one without any advantage.
    fig.add_bar(
        x=[NO_ADVANTAGE],
        y=[none],
        name=SOURCE_LABELS["none"],
        marker_color=SOURCE_COLORS["none"],
        hovertemplate=f"{NO_ADVANTAGE}: %{{y:,}} groups<extra></extra>",
    )
    longest = max((len(c) for c in bins.values()), default=0)
    labels = [std_bin_label(i, width) for i in range(longest)]
    if any(beyond.values()):
        labels.append(TOO_LARGE)
    for source, counts in bins.items():
        over = beyond.get(source, 0)
        # A source's bins padded to the last one, so that its too-large count lands on its bar.
        padded = [*counts, *[0] * (longest - len(counts)), over] if over else list(counts)
        fig.add_bar(
            x=labels[: len(padded)],
            y=padded,
            name=SOURCE_LABELS[source],
            hovertemplate=f"std %{{x}}, {source}: %{{y:,}} groups<extra></extra>",
            marker_color=SOURCE_COLORS[source],
        )
    fig.update_layout(
        title="Reward standard deviation of the groups, by source",
        xaxis_title="group reward std",
        yaxis_title="groups",
        barmode="stack",
        bargap=0.1,
        height=380,
        # Room under the axis for its bins' names, turned on end in a narrow window, and the
        # legend beneath them.
        margin={"l": 40, "r": 10, "t": 40, "b": 130},
        legend={"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0, "x": 0},
    )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[NO_ADVANTAGE, *labels])
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
