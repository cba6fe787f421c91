"""Plotly figures of the Runs page, built from read-model records.

Every per-run chart has one row per run on the y axis, the run's colour from its id, so a chart
of 20 runs stays readable and a run looks the same on every chart and page. Labels keep the
ends of a long name; the full name is in the hover text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from app.dashboard import analysis
from app.dashboard.components.colors import hover_name, plot_label, run_color
from app.dashboard.components.render import escape_markdown
from storage.read_models import Distribution, RunSummary

ACTION_MIX_KEYS = ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER", "UNPARSED")
# Shades of one hue in the order an episode goes (look, then query, then answer), so the mix
# reads as a scale and never as runs; unparsed output is grey and hatched, apart from them all.
_ACTION_COLORS = ("#c6dbef", "#6baed6", "#2171b5", "#08306b", "#737373")
_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 40}
_ROW_PX = 26
_DOT_PX = 22
"""Diameter of the dot of the most common reward of a run in the reward strip."""
FEW_EPISODES = 5
"""A run with fewer finished episodes is marked in the charts: its figures are mostly noise."""


def _height(n: int) -> int:
    return 110 + _ROW_PX * max(n, 2)


def _rows_layout(fig: go.Figure, title: str, n: int, **axes: object) -> go.Figure:
    fig.update_layout(
        title=title,
        height=_height(n),
        margin=_MARGIN,
        showlegend=False,
        yaxis={"autorange": "reversed", "automargin": True},
        **axes,
    )
    return fig


def run_label(run: RunSummary) -> str:
    """The run's row label; a run of few episodes says how few."""
    label = plot_label(run.id, run.name)
    n = run.episodes_finished
    return label if n >= FEW_EPISODES else f"{label} ({n} ep.)"


def accuracy(runs: Sequence[RunSummary]) -> go.Figure:
    """Accuracy per run with its 95% interval (Wilson, over episodes)."""
    lows, highs = [], []
    for r in runs:
        ci = analysis.wilson_interval(r.correct, r.episodes_finished)
        acc = r.accuracy or 0.0
        lows.append(0.0 if ci is None else acc - ci[0])
        highs.append(0.0 if ci is None else ci[1] - acc)
    fig = go.Figure(
        go.Bar(
            x=[r.accuracy for r in runs],
            y=[run_label(r) for r in runs],
            orientation="h",
            marker_color=[run_color(r.id) for r in runs],
            error_x={"type": "data", "symmetric": False, "array": highs, "arrayminus": lows},
            customdata=[(hover_name(r.id, r.name), r.episodes_finished) for r in runs],
            hovertemplate="%{customdata[0]}<br>%{x:.1%} of %{customdata[1]:,} episodes"
            "<extra></extra>",
        )
    )
    return _rows_layout(
        fig,
        "Accuracy (95% interval)",
        len(runs),
        xaxis={"tickformat": ".0%", "range": [0, 1.04]},  # room for the 100% tick
    )


def mean_reward(runs: Sequence[RunSummary]) -> go.Figure:
    """Mean episode reward per run, on its own axis."""
    fig = go.Figure(
        go.Bar(
            x=[r.mean_reward for r in runs],
            y=[run_label(r) for r in runs],
            orientation="h",
            marker_color=[run_color(r.id) for r in runs],
            customdata=[hover_name(r.id, r.name) for r in runs],
            hovertemplate="%{customdata}<br>%{x:.3f}<extra></extra>",
        )
    )
    return _rows_layout(fig, "Mean episode reward", len(runs))


def undrawn_rewards(runs: Sequence[RunSummary]) -> str:
    """A line naming the runs whose mean reward is not a finite number (rewards summed past a
    float's range), which the reward chart leaves out without a word; markdown, names escaped."""
    names = [
        f"{escape_markdown(f'{r.name} (#{r.id})')}: {r.mean_reward}"
        for r in runs
        if r.mean_reward is not None and not math.isfinite(r.mean_reward)
    ]
    listed = ", ".join(names)
    return f"Mean episode reward leaves out, as not a finite number: {listed}." if names else ""


def _quartiles(hist: Sequence[tuple[float, int]]) -> tuple[float, float, float, float, float]:
    """min, q1, median, q3, max of the values a histogram counts (at their bin values)."""
    values = sorted((v, c) for v, c in hist if c > 0)
    total = sum(c for _, c in values)

    def at(q: float) -> float:
        rank, seen = q * (total - 1), 0
        for v, c in values:
            seen += c
            if seen > rank:
                return v
        return values[-1][0]

    return values[0][0], at(0.25), at(0.5), at(0.75), values[-1][0]


def reward_strip(dists: Sequence[Distribution], runs: dict[int, RunSummary]) -> go.Figure:
    """Episode reward per run as a strip of the store's bins (each reward at its nearest 0.1),
    each a dot sized by its share of the run's episodes: rewards are nearly binary, which a
    box would smear."""
    fig = go.Figure()
    shown = 0
    for d in dists:
        run = runs.get(d.run_id)
        hist = [(float(v), c) for v, c in d.reward_histogram if c > 0]
        if run is None or not hist:
            continue
        total = sum(c for _, c in hist)
        fig.add_scatter(
            x=[v for v, _ in hist],
            y=[run_label(run)] * len(hist),
            mode="markers",
            marker={
                "color": run_color(run.id),
                "size": [max(4.0, _DOT_PX * (c / total) ** 0.5) for _, c in hist],
                "line": {"width": 0},
            },
            customdata=[(hover_name(run.id, run.name), c, c / total) for _, c in hist],
            hovertemplate="%{customdata[0]}<br>reward %{x:.1f} ± 0.05: %{customdata[1]:,} episodes "
            "(%{customdata[2]:.0%})<extra></extra>",
            name=run.name,
        )
        shown += 1
    return _rows_layout(
        fig,
        "Episode reward (dot area: share of episodes)",
        shown,
        xaxis={"title": "reward (to the nearest 0.1)", "zeroline": False},
    )


def steps_spread(dists: Sequence[Distribution], runs: dict[int, RunSummary]) -> go.Figure:
    """Steps per finished episode per run, as a box."""
    fig = go.Figure()
    shown = 0
    for d in dists:
        hist = [(float(v), c) for v, c in d.steps_histogram]
        run = runs.get(d.run_id)
        if run is None or not any(c for _, c in hist):
            continue
        lo, q1, med, q3, hi = _quartiles(hist)
        total = sum(c for _, c in hist)
        fig.add_box(
            y=[run_label(run)],
            lowerfence=[lo],
            q1=[q1],
            median=[med],
            q3=[q3],
            upperfence=[hi],
            mean=[sum(v * c for v, c in hist) / total],
            orientation="h",
            marker_color=run_color(run.id),
            name=run.name,
        )
        shown += 1
    return _rows_layout(fig, "Steps per episode", shown, xaxis={"title": "steps"})


def action_mix(dists: Sequence[Distribution], runs: dict[int, RunSummary]) -> go.Figure:
    """Share of each action kind (and unparsed outputs) per run, stacked to 100%."""
    shown = [d for d in dists if d.run_id in runs]
    labels = [run_label(runs[d.run_id]) for d in shown]
    names = [hover_name(d.run_id, runs[d.run_id].name) for d in shown]
    totals = [max(1, sum(d.action_mix.values())) for d in shown]
    fig = go.Figure()
    for key, color in zip(ACTION_MIX_KEYS, _ACTION_COLORS, strict=True):
        shares = [d.action_mix.get(key, 0) / t for d, t in zip(shown, totals, strict=True)]
        fig.add_bar(
            name=key,
            x=shares,
            y=labels,
            orientation="h",
            marker={"color": color, "pattern": {"shape": "/" if key == "UNPARSED" else ""}},
            customdata=names,
            hovertemplate=f"%{{customdata}}<br>{key}: %{{x:.1%}}<extra></extra>",
        )
    _rows_layout(fig, "Action mix", len(shown), xaxis={"tickformat": ".0%"}, barmode="stack")
    # The legend at the bottom of the figure, below the axis labels (a paper-relative y put it
    # over the ticks of a short chart); 30 px more margin and height make room for it. Plotly
    # lists stacked bars last first; "normal" lists them left to right, as they stack.
    fig.update_layout(
        showlegend=True,
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0,
            "yanchor": "bottom",
            "traceorder": "normal",
        },
        margin={**_MARGIN, "b": _MARGIN["b"] + 30},
        height=_height(len(shown)) + 30,
    )
    return fig
