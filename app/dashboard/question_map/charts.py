"""Figures of the question x checkpoint map: the success-rate heatmap and accuracy per run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app.dashboard.components.colors import plot_label, plotly_text, run_color
from app.dashboard.question_map.matrix import AccuracyPoint, QuestionMap
from storage.read_models import RunKey, RunStep, RunSummary, run_of

LABELLED_ROWS = 60
"""Up to this many questions the y axis names each one; beyond, hover names them."""
SVG_OVERLAY_CELLS = 2_000
"""Up to this many cells the hover and click overlay is drawn as SVG, beyond as WebGL:
a WebGL context costs a fixed start-up in a browser without a GPU, SVG a cost per point."""
COLORSCALE = "Viridis"
"""Purple (0%) through teal to yellow (100%): told apart by colour-blind readers, as red-green
is not, and never the grey of a cell not played (Cividis is grey at 50%)."""
_NOT_PLAYED = "#e8e8e8"


def column_labels(
    keys: Sequence[RunKey], names: Sequence[str], one_run: RunSummary | None
) -> list[str]:
    """The runs' axis labels; `step N` alone when every column is a step of `one_run`, which
    the chart's title names once (its name ten times over was cut, or turned on end)."""
    return [
        f"step {k.train_step}"
        if one_run is not None and isinstance(k, RunStep)
        else plot_label(run_of(k), n)
        for k, n in zip(keys, names, strict=True)
    ]


def _columns(one_run: RunSummary | None) -> str:
    """What the columns are, for a title."""
    return "run" if one_run is None else f"training step of {plot_label(one_run.id, one_run.name)}"


def heatmap(
    qmap: QuestionMap, names: Sequence[str], one_run: RunSummary | None = None
) -> go.Figure:
    """Success rate per question (rows, easiest at the top) and run (columns, in order), or
    training step of `one_run`.

    A heatmap cannot be selected in Streamlit, so an invisible scatter with one point per
    cell lies over it (SVG or WebGL by size, `SVG_OVERLAY_CELLS`): hovering names the cell,
    clicking selects it (point index = row x runs + column). Coordinates are positions, so
    the payload carries each question id once per cell only as hover text.
    """
    n, runs = qmap.rates.shape
    fig = go.Figure()
    fig.add_heatmap(
        z=qmap.rates,
        x=list(range(runs)),
        y=list(range(n)),
        zmin=0.0,
        zmax=1.0,
        colorscale=COLORSCALE,
        colorbar={"title": {"text": "success"}, "tickformat": ".0%"},
        hoverinfo="skip",
        xgap=1 if runs <= 40 else 0,
        ygap=1 if n <= LABELLED_ROWS else 0,
    )
    rows, cols = np.divmod(np.arange(n * runs), runs)
    rates = qmap.rates.ravel()
    shown = np.where(
        np.isnan(rates), "not played", np.char.mod("%.0f%%", np.nan_to_num(rates) * 100)
    )
    # A numpy array, not a list: plotly checks a list's strings one by one. Names and ids are
    # escaped: Plotly reads a subset of HTML in hovers.
    shown_names = [plotly_text(n) for n in names]
    shown_ids = [plotly_text(q) for q in qmap.question_ids]
    text = np.array(
        [
            f"{shown_ids[r]}<br>{shown_names[c]}: {s} of {e}"
            for r, c, s, e in zip(
                rows.tolist(),
                cols.tolist(),
                shown.tolist(),
                qmap.episodes.ravel().tolist(),
                strict=True,
            )
        ]
    )
    overlay = go.Scatter if n * runs <= SVG_OVERLAY_CELLS else go.Scattergl
    fig.add_trace(
        overlay(
            x=cols,
            y=rows,
            mode="markers",
            marker={"size": 8, "opacity": 0.0},
            selected={"marker": {"opacity": 0.0}},
            unselected={"marker": {"opacity": 0.0}},
            text=text,
            hovertemplate="%{text}<extra></extra>",
            showlegend=False,
        )
    )
    labelled = n <= LABELLED_ROWS
    # Fixed ranges: autorange pads for the overlay's markers, and the padding would show as
    # grey "not played" bands around the cells.
    fig.update_yaxes(
        range=[n - 0.5, -0.5],
        tickvals=list(range(n)) if labelled else [],
        ticktext=shown_ids if labelled else [],
        title_text=None if labelled else f"{n:,} questions, easiest first",
        showgrid=False,
        zeroline=False,
    )
    fig.update_xaxes(
        range=[-0.5, runs - 0.5],
        tickvals=list(range(runs)),
        ticktext=column_labels(qmap.run_ids, names, one_run),
        showgrid=False,
        zeroline=False,
        automargin=True,  # rotated labels of long names keep their ends
    )
    fig.update_layout(
        title=f"Success rate per question and {_columns(one_run)}",
        height=min(900, max(320, 18 * n + 140)),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        plot_bgcolor=_NOT_PLAYED,
        clickmode="event+select",
        hovermode="closest",
        dragmode="zoom",
    )
    return fig


def cell_of(qmap: QuestionMap, point_index: int) -> tuple[RunKey, str]:
    """(run id or run and step, question id) of a heatmap point from its index in the
    overlay."""
    row, col = divmod(point_index, len(qmap.run_ids))
    label = qmap.question_ids[row]
    return qmap.run_ids[col], qmap.asked.get(label, label)


def accuracy_line(
    points: Sequence[AccuracyPoint],
    names: Sequence[str],
    *,
    joined: bool = True,
    one_run: RunSummary | None = None,
) -> go.Figure:
    """Each run's (or training step of `one_run`'s) accuracy with its bootstrap 95% interval,
    in order; `joined`: a line through them (not for runs that played different questions:
    their points do not compare as a trend)."""
    acc = [p.accuracy for p in points]
    up = [None if p.high is None or p.accuracy is None else p.high - p.accuracy for p in points]
    down = [None if p.low is None or p.accuracy is None else p.accuracy - p.low for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=column_labels([p.run_id for p in points], names, one_run),
        y=acc,
        mode="lines+markers" if joined else "markers",
        line_color="#9e9e9e",
        marker={"color": [run_color(run_of(p.run_id)) for p in points], "size": 11},
        error_y={
            "type": "data",
            "array": up,
            "arrayminus": down,
            "visible": True,
            "color": "#555555",
        },
        customdata=[[p.low, p.high, p.questions] for p in points],
        hovertemplate="%{x}: %{y:.1%}<br>95% CI %{customdata[0]:.1%} to %{customdata[1]:.1%}"
        "<br>%{customdata[2]:,} questions<extra></extra>",
        name="accuracy",
    )
    fig.update_layout(
        # The run's name takes the room of the interval's longer name.
        title=f"Accuracy per {_columns(one_run)} "
        + ("(95% bootstrap CI over questions)" if one_run is None else "(95% CI)"),
        yaxis_tickformat=".0%",
        yaxis_title="accuracy",
        # Its whole range: runs all at 0% or 100% leave autorange nothing to span (0-200%).
        yaxis_range=[-0.05, 1.05],
        height=320,
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
    )
    fig.update_xaxes(automargin=True)
    return fig
