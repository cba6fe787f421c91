"""The question map's heatmap figure: its overlay's kind by size, and cells by point index."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest

from app.dashboard.components.colors import plot_label, run_color
from app.dashboard.question_map.charts import (
    SVG_OVERLAY_CELLS,
    accuracy_line,
    cell_of,
    heatmap,
)
from app.dashboard.question_map.matrix import AccuracyPoint, QuestionMap


def _map(questions: int, runs: int) -> QuestionMap:
    rates = np.linspace(1.0, 0.0, questions * runs).reshape(questions, runs)
    rates[0, 0] = np.nan  # a run that did not play a question
    return QuestionMap(
        run_ids=[10 + r for r in range(runs)],
        question_ids=[f"q{i:05d}" for i in range(questions)],
        rates=rates,
        episodes=np.where(np.isnan(rates), 0, 4),
    )


@pytest.mark.parametrize(
    ("questions", "runs", "kind"),
    [
        (121, 4, go.Scatter),  # the demo's size: SVG, no WebGL context to create
        (SVG_OVERLAY_CELLS // 4, 4, go.Scatter),
        (SVG_OVERLAY_CELLS // 4 + 1, 4, go.Scattergl),
        (5_000, 10, go.Scattergl),
    ],
)
def test_the_overlay_is_svg_for_small_maps_and_webgl_for_large(
    questions: int, runs: int, kind: Any
) -> None:
    qmap = _map(questions, runs)
    fig = heatmap(qmap, [f"ckpt-{r}" for r in range(runs)])
    traces: list[Any] = list(fig.data)
    cells, overlay = traces
    assert isinstance(cells, go.Heatmap)
    assert type(overlay) is kind
    assert len(overlay.x) == questions * runs
    # Whatever its kind, a point's index names its cell, and its hover text says which.
    for index in (0, runs + 1, questions * runs - 1):
        run_id, question_id = cell_of(qmap, index)
        row, col = divmod(index, runs)
        assert (overlay.y[index], overlay.x[index]) == (row, col)
        assert (run_id, question_id) == (qmap.run_ids[col], qmap.question_ids[row])
        assert overlay.text[index].startswith(f"{question_id}<br>ckpt-{col}: ")
    assert overlay.text[0].endswith("not played of 0")


def test_the_scale_is_safe_for_colour_blind_readers_and_runs_wear_their_colours() -> None:
    # Red-green (RdYlGn) told 0% from 100% by a hue red-green colour-blind readers confuse.
    qmap = _map(3, 2)
    fig = heatmap(qmap, ["<b>a</b>", "b"])
    cells, overlay = fig.data
    scale = [c for _, c in cells.colorscale]
    assert scale == [c for _, c in go.Heatmap(colorscale="Viridis").colorscale]
    ticks = fig.layout.xaxis.ticktext
    assert run_color(10) in ticks[0] and "&lt;b&gt;a&lt;/b&gt; #10" in ticks[0]
    assert "<b>a</b>" not in overlay.text[1]  # a run name is user text: escaped in hovers
    points = [AccuracyPoint(10, 0.5, 0.4, 0.6, 3), AccuracyPoint(11, 0.7, 0.6, 0.8, 3)]
    [line] = accuracy_line(points, ["a", "b"]).data
    assert list(line.marker.color) == [run_color(10), run_color(11)]
    assert line.mode == "lines+markers"
    # Runs over different questions (an import beside a benchmark run): points, no trend line.
    [apart] = accuracy_line(points, ["a", "b"], joined=False).data
    assert apart.mode == "markers"


def test_the_accuracy_axis_spans_no_more_than_0_to_100_percent() -> None:
    # Every run at 100% (an interval of no width) drew an axis up to 200%.
    perfect = [AccuracyPoint(10, 1.0, 1.0, 1.0, 6), AccuracyPoint(11, 1.0, 1.0, 1.0, 6)]
    low, high = accuracy_line(perfect, ["a", "b"]).layout.yaxis.range
    assert -0.1 < low <= 0.0 and 1.0 <= high < 1.1


def test_a_quote_in_a_run_name_shows_as_a_quote() -> None:
    # Plotly decodes &lt; and &amp; in labels but not &quot;: a name with " read &quot;.
    fig = heatmap(_map(3, 2), ['a "quoted" <i>run</i>', "b"])
    tick = fig.layout.xaxis.ticktext[0]
    assert 'a "quoted" &lt;i&gt;run&lt;/i&gt; #10' in tick and "&quot;" not in tick
    assert plot_label(3, 'x "y"').endswith('x "y" #3')
