"""The Training page's figures: one quantity per chart, on its own axis and unit, raw points
with a smoothed trend, and hovers that say which questions each step drew."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import plotly.graph_objects as go

from app.dashboard.components.colors import plotly_text
from app.dashboard.groups.charts import SOURCE_COLORS
from app.dashboard.groups.signal import SOURCE_LABELS
from app.dashboard.training.curves import Curves, step_ranges, trend, trend_window
from rollout_core.grpo import SIGNAL_SOURCES

# The legend sits under the plot, so that a half-width chart keeps its width on a narrow
# screen (a legend on the right took half of it at 800 px).
_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 10, "t": 40, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0},
    "hovermode": "closest",
    # A box selected picks a range of training steps (the page opens their episodes).
    "selectdirection": "h",
}
_MAX_TICKS = 10
_TREND_FROM = 3
"""Points a curve needs before a trend is drawn beside them."""
_MARKERS_UP_TO = 200
"""Points a curve marks each of; more are drawn as a line alone."""
_GAPPED_BARS = 60
"""Bars a gap is drawn between; past this many, a gap is a pixel or less and draws as stray
white lines across the stack."""
RATE = ".0%"
_DRAWN_PER_LINE = 3


@dataclass(frozen=True, slots=True)
class Series:
    """One quantity a chart draws: its legend name, `TrainingStep` attribute and colour."""

    name: str
    attr: str
    color: str


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart of the page: a quantity (or two of the same unit) over training steps."""

    title: str
    axis: str
    """The y axis' title, with its unit."""
    series: tuple[Series, ...]
    tickformat: str | None = None
    note: str = ""
    """What the numbers are, under the chart."""
    imported_note: str = ""
    """The note for a run rollscope did not play (an import, a Recorder's), where it differs."""
    drawn: bool = False
    """Hovers name the questions each point's steps drew: for the quantities those questions
    move (on a long run, naming them on every chart made the page several MB)."""

    @property
    def trended(self) -> bool:
        """One quantity gets a smoothed trend beside its points; two would crowd the chart."""
        return len(self.series) == 1


# Okabe-Ito colours (and a grey), told apart by colour-blind readers; one per quantity.
CHARTS: tuple[Chart, ...] = (
    Chart(
        "Accuracy",
        "episodes correct",
        (Series("accuracy", "accuracy", "#009E73"),),
        RATE,
        "Share of the step's episodes that answered correctly.",
        drawn=True,
    ),
    Chart(
        "Reward",
        "mean episode reward",
        (Series("reward", "reward", "#0072B2"),),
        None,
        "Mean episode reward, as rollscope's environment gives it: 1 for a correct answer, "
        "plus shaping (QUERY progress up to +0.1, −0.01 per failed action). The trainer "
        "trains on its own reward functions' sum (TRL logs it as `reward`), this one where "
        "that is `app.trl.shaped_reward`.",
        "Mean episode reward as the trainer's files give it (verl's `score`, TRL's reward "
        "columns summed, ...): its own reward function, not rollscope's shaping.",
        drawn=True,
    ),
    Chart(
        "Reward spread",
        "reward standard deviation",
        (
            Series("across the step (reward_std)", "reward_std", "#D55E00"),
            Series("within groups (mean)", "group_reward_std", "#CC79A7"),
        ),
        None,
        "**reward_std** (as TRL logs it of the reward it trains on): the std of all the "
        "step's episode rewards, differences between questions included. **within groups**: "
        "the mean over the step's groups of each group's own std, the spread GRPO's "
        "advantages are scaled by where the trainer trains on this reward; only this one is "
        "learning signal.",
        drawn=True,
    ),
    Chart(
        "Unparsed outputs",
        "steps without an action line",
        (Series("unparsed rate", "unparsed_rate", "#E69F00"),),
        RATE,
        "Share of the model's outputs with no action the environment could read.",
    ),
    Chart(
        "Steps per episode",
        "actions per episode",
        (Series("mean steps", "mean_steps", "#56B4E9"),),
        None,
    ),
    Chart(
        "Token log-probability",
        "mean log-prob per token (nats)",
        (Series("mean token log-prob", "mean_logprob", "#000000"),),
        None,
        "Closer to 0: the model is surer of its tokens.",
    ),
    Chart(
        "Model tokens per episode",
        "tokens per episode",
        (Series("completions/mean_length", "mean_tokens", "#7F7F7F"),),
        None,
        "Tokens the model generated per episode (TRL's `completions/mean_length`).",
    ),
)
SIGNAL_NOTE = (
    "Each step's groups by where their reward spread comes from: right and wrong samples "
    "(**correctness**), shaping terms alone with every sample right or every one wrong "
    "(**shaping only**), or nothing (**no advantage**: all rewards equal, TRL's "
    "`frac_reward_zero_std`, or, where the trainer reported its advantages, every one 0)."
)


def _steps_text(curves: Curves) -> list[str]:
    """Each point's training steps in words."""
    if curves.per_point == 1:
        return [f"step {p.train_step}" for p in curves.points]
    return [
        f"steps {first}-{p.train_step} (mean)"
        for first, p in zip(curves.firsts, curves.points, strict=True)
    ]


def _drawn_lines(drawn: str) -> str:
    """A point's questions for a hover, `_DRAWN_PER_LINE` a line: on one line, the box of a
    point that drew six grew wider than the chart."""
    # Question ids are dataset text, and Plotly reads a subset of HTML in hovers.
    parts = plotly_text(drawn).split(", ")
    lines = [
        ", ".join(parts[i : i + _DRAWN_PER_LINE]) for i in range(0, len(parts), _DRAWN_PER_LINE)
    ]
    return "<br>drew " + ",<br>".join(lines)


def _hover_data(curves: Curves, drawn: bool = True) -> list[list[Any]]:
    """Per point: its steps in words, its episodes and (with `drawn`) the questions it drew."""
    return [
        [steps, p.episodes, _drawn_lines(d) if d and drawn else ""]
        for steps, p, d in zip(_steps_text(curves), curves.points, curves.drawn, strict=True)
    ]


def _value(name: str, tickformat: str | None) -> str:
    return f"{name} %{{y:{'.1%' if tickformat == RATE else '.3f'}}}"


def _x_axis(fig: go.Figure, xs: Sequence[int]) -> None:
    # Training steps are whole numbers: a short run gets a tick at each step it logged (TRL
    # logs every 10th: 10, 20, not 21 ticks from 10 to 20), none at 0.5. A longer one keeps
    # plotly's round ticks (forced to a tenth of the span, they read 3202, 6404, ...).
    fig.update_xaxes(title="training step", tickformat="d")
    steps = sorted(set(xs))
    if not steps:
        return
    gap = math.gcd(*(b - a for a, b in pairwise(steps))) or 1
    if (steps[-1] - steps[0]) // gap <= _MAX_TICKS:
        fig.update_xaxes(tick0=steps[0], dtick=gap)


def marked(curves: Curves) -> bool:
    """Whether the curves mark each point (a click opens its episodes): a longer run's are
    lines alone, which a browser draws faster."""
    return len(curves.points) <= _MARKERS_UP_TO


def _drag(marked: bool) -> dict[str, Any]:
    """What a drag across the chart does: with points marked it pans (the dashboard's default
    where a click picks a point), and with lines alone it selects a range of steps."""
    return {} if marked else {"dragmode": "select"}


def series_values(curves: Curves, chart: Chart) -> list[tuple[str, list[float | None]]]:
    """Each of the chart's quantities by its legend name, with its value at each point."""
    return [(s.name, [getattr(p, s.attr) for p in curves.points]) for s in chart.series]


def undrawn_note(curves: Curves, lines: Sequence[tuple[str, Sequence[float | None]]]) -> str:
    """A line naming the points of `lines` (legend name, values) that are not finite numbers
    (sums past a float's range): Plotly leaves them out without a word."""
    parts = []
    for name, values in lines:
        by_value: dict[str, list[int]] = {}  # inf, -inf, nan: each with its points
        for i, value in enumerate(values):
            if value is not None and not math.isfinite(value):
                by_value.setdefault(str(value), []).append(i)
        parts += [f"{name} {v} at {_points_text(curves, ix)}" for v, ix in by_value.items()]
    return f"Not drawn, as not a finite number: {'; '.join(parts)}." if parts else ""


def _points_text(curves: Curves, indexes: Sequence[int]) -> str:
    """'step 4', 'steps 4, 9' or, for averaged points, 'the points of steps 1–10, 21–30'."""
    if curves.per_point == 1:
        steps = [curves.points[i].train_step for i in indexes]
        return f"step{'s' if len(steps) > 1 else ''} {step_ranges(steps)}"
    spans = [f"{curves.firsts[i]}–{curves.points[i].train_step}" for i in indexes]
    return f"the point{'s' if len(spans) > 1 else ''} of steps {', '.join(spans)}"


def has_values(curves: Curves, chart: Chart) -> bool:
    """Whether any step has a value of the chart's quantities (an import's files hold no
    token log-probs or counts)."""
    return any(getattr(p, s.attr) is not None for p in curves.points for s in chart.series)


def figure(curves: Curves, chart: Chart) -> go.Figure:
    """The chart's quantities over training steps (gaps where a step has no value), with a
    trailing-mean trend beside one quantity's points."""
    fig = go.Figure()
    points = curves.points
    xs = [s.train_step for s in points]
    markers = marked(curves)
    hover = _hover_data(curves, chart.drawn)
    tail = "<br>%{customdata[0]} · %{customdata[1]:,} episodes%{customdata[2]}<extra></extra>"
    # A trend of one or two points is those points again.
    trended = chart.trended and len(points) >= _TREND_FROM
    for s in chart.series:
        ys = [getattr(p, s.attr) for p in points]
        raw: dict[str, Any] = {
            "name": s.name,
            "x": xs,
            "y": ys,
            "customdata": hover,
            "hovertemplate": _value(s.name, chart.tickformat) + tail,
        }
        if trended and markers:
            # The points alone, the trend carries the line.
            fig.add_scatter(**raw, mode="markers", marker={"color": s.color, "opacity": 0.55})
        else:
            mode = "lines+markers" if markers else "lines"
            fig.add_scatter(**raw, mode=mode, line={"color": s.color})
        if trended:
            window = trend_window(len(points))
            fig.add_scatter(
                name=f"trend (mean of {window} points)",
                x=xs,
                y=trend(ys, [p.episodes for p in points], window),
                mode="lines",
                line={"color": s.color, "width": 3},
                hovertemplate=_value("trend", chart.tickformat)
                + f" (mean of {window} points)<extra></extra>",
            )
    layout: dict[str, Any] = {
        **_LAYOUT,
        **_drag(markers),
        "title": chart.title,
        "yaxis_title": chart.axis,
    }
    if chart.tickformat:
        layout["yaxis_tickformat"] = chart.tickformat
    if chart.tickformat == RATE:  # a rate: its whole range, not -100%..100% around a flat 0
        layout["yaxis_range"] = [-0.02, 1.02]
    elif narrow := _least_range([y for trace in fig.data for y in trace.y]):
        layout["yaxis_range"] = narrow
    fig.update_layout(**layout)
    _x_axis(fig, xs)
    return fig


def _least_range(ys: Sequence[float | None]) -> list[float] | None:
    """A y range a tenth of the values' scale wide (their size, at least 1) around values
    that differ by less than that; None for values that differ more. Left to itself the chart
    zooms into whatever differs, down to a mean's last digits (the same rewards summed in
    another order), and draws a change of a ten-thousandth as a fall down the whole chart."""
    values = [y for y in ys if y is not None and math.isfinite(y)]
    if not values:
        return None
    low, high = min(values), max(values)
    scale = max(1.0, abs(high), abs(low))
    if high - low >= 0.1 * scale:
        return None
    middle, half = (low + high) / 2, 0.05 * scale
    return [middle - half, middle + half]


NAMED_DRAWN = 8
"""Named rewards a chart draws at most (by name): more lines than that read as a tangle."""
# Not the Reward chart's blue first: its line beside this one is another quantity.
_NAMED_COLORS = ("#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#0072B2", "#000000",
                 "#7F7F7F")  # fmt: skip


def drawn_rewards(rewards: dict[str, list[float | None]]) -> list[tuple[str, list[float | None]]]:
    """The named rewards the chart draws: the first `NAMED_DRAWN` by name."""
    return list(rewards.items())[:NAMED_DRAWN]


def named_rewards_note(names: int) -> str:
    """What the named rewards' chart draws, under it."""
    note = (
        "Each reward the episodes carry by name, as its mean over the step's episodes: a "
        "trainer's reward functions (TRL logs them as `rewards/<name>/mean` and trains on "
        "their weighted sum), a file's reward columns, a Recorder's `rewards=`."
    )
    if names > NAMED_DRAWN:
        note += f" The first {NAMED_DRAWN} of {names} by name are drawn."
    return note


def named_rewards_figure(curves: Curves, rewards: dict[str, list[float | None]]) -> go.Figure:
    """Each named reward's mean over training steps, a line each (the first `NAMED_DRAWN`);
    gaps where a step holds none of it (a recorded batch the trainer has not scored yet)."""
    fig = go.Figure()
    xs = [p.train_step for p in curves.points]
    markers = marked(curves)
    hover = _hover_data(curves, drawn=False)
    drawn = drawn_rewards(rewards)
    for (name, ys), color in zip(drawn, _NAMED_COLORS, strict=False):
        fig.add_scatter(
            # A name is the file's or the trainer's text; Plotly reads a subset of HTML in it.
            name=plotly_text(name),
            x=xs,
            y=ys,
            customdata=hover,
            mode="lines+markers" if markers else "lines",
            line={"color": color},
            showlegend=True,  # the name is the news, with one line too
            hovertemplate="%{fullData.name} %{y:.3f}<br>%{customdata[0]} · "
            "%{customdata[1]:,} episodes<extra></extra>",
        )
    layout: dict[str, Any] = {
        **_LAYOUT,
        **_drag(markers),
        "title": "Rewards by name",
        "yaxis_title": "mean reward",
    }
    if narrow := _least_range([y for _, ys in drawn for y in ys]):
        layout["yaxis_range"] = narrow
    fig.update_layout(**layout)
    _x_axis(fig, xs)
    return fig


def signal_figure(curves: Curves) -> go.Figure:
    """Each point's groups by the source of their spread, as shares stacked to 100%: bars, or
    on a curve of more points than `_MARKERS_UP_TO` stacked areas (a browser draws thousands of
    bars slowly, an area as one shape) with one hover for the three sources at a step."""
    fig = go.Figure()
    xs = [p.train_step for p in curves.points]
    hover = _hover_data(curves)
    bars = marked(curves)
    totals = [sum(point.values()) for point in curves.sources]
    for i, source in enumerate(SIGNAL_SOURCES):
        counts = [point[source] for point in curves.sources]
        # The steps and what they drew: in each bar's hover, once in the areas' shared one.
        said = bars or i == 0
        tail = "<br>%{customdata[2]}%{customdata[4]}" if said else ""
        trace: dict[str, Any] = {
            "name": SOURCE_LABELS[source],
            "x": xs,
            "y": [c / t if t else None for c, t in zip(counts, totals, strict=True)],
            "customdata": [
                [c, t, *h] if said else [c, t]
                for c, t, h in zip(counts, totals, hover, strict=True)
            ],
            "hovertemplate": f"{SOURCE_LABELS[source]}: %{{customdata[0]}} of "
            f"%{{customdata[1]}} groups{tail}<extra></extra>",
        }
        color = SOURCE_COLORS[source]
        if bars:
            fig.add_bar(**trace, marker_color=color)
        else:
            fig.add_scatter(
                **trace, mode="lines", stackgroup="sources", fillcolor=color, line_color=color
            )
    fig.update_layout(
        **{**_LAYOUT, "title": "Learning signal by source", "yaxis_title": "share of groups"},
        **_drag(bars),
        barmode="stack",
        bargap=0.1 if len(xs) <= _GAPPED_BARS else 0,
        yaxis_tickformat=RATE,
        yaxis_range=[0, 1],
    )
    if not bars:
        fig.update_layout(hovermode="x unified")
    _x_axis(fig, xs)
    return fig
