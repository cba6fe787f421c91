"""The failure-class mix: stacked bars per run (Runs) and how it moved between two runs
(Compare), each class linking to its episodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.dashboard.components import nav
from app.dashboard.components.colors import plot_label, short_name
from app.dashboard.components.render import COUNT_FORMAT, MISSING
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.records import FAILURE_CLASSES, FailureClass
from storage.read_models import Distribution, RunKey, RunSummary

P_CLASS = "class"
"""Episodes page: a failure class to filter by, repeated for several."""
# Success green, wrong answers in reds, stuck behaviours in purples and browns, the rest grey.
CLASS_COLORS: dict[FailureClass, str] = {
    "correct": "#2ca02c",
    "wrong_after_gold": "#ff7f0e",
    "wrong_answer": "#d62728",
    "sql_errors": "#9467bd",
    "unparsed": "#7f7f7f",
    "action_loop": "#8c564b",
    "budget_exhausted": "#17becf",
    "env_error": "#1f1f1f",
    "abandoned": "#c7c7c7",
}
_BAR_PX = 34
"""Height of one run's bar."""
_LEGEND_PX = 110
"""Room under the bars for the eight classes' legend (four rows when the chart is narrow)."""


def shares(dist: Distribution) -> dict[FailureClass, float]:
    """Each class's share of the run's classified episodes (zeros for an empty run)."""
    total = sum(dist.failure_counts.get(c, 0) for c in FAILURE_CLASSES)
    return {c: dist.failure_counts.get(c, 0) / total if total else 0.0 for c in FAILURE_CLASSES}


def mix_chart(dists: Sequence[Distribution], names: Mapping[RunKey, str]) -> go.Figure:
    """Share of finished episodes in each failure class, one stacked bar per run; `names` are
    Plotly labels (`plot_label`: a run name is user text, and Plotly reads HTML in labels).

    Horizontal bars, the first run at the top: run names read across instead of on end, and
    the legend goes under the bars, where a narrow chart still has room for eight classes.
    """
    fig = go.Figure()
    labels = [names.get(d.key, str(d.key)) for d in dists]
    for c in FAILURE_CLASSES:
        fig.add_bar(
            name=FAILURE_LABELS[c],
            y=labels,
            x=[shares(d)[c] for d in dists],
            orientation="h",
            customdata=[d.failure_counts.get(c, 0) for d in dists],
            marker_color=CLASS_COLORS[c],
            hovertemplate="%{y}<br>" + FAILURE_LABELS[c] + ": %{x:.1%} (%{customdata})"
            "<extra></extra>",
        )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(
        title="Failure classes",
        xaxis_title="share of episodes",
        xaxis_tickformat=".0%",
        barmode="stack",
        height=100 + _LEGEND_PX + _BAR_PX * max(2, len(dists)),
        margin={"l": 10, "r": 10, "t": 40, "b": 40 + _LEGEND_PX},
        legend={
            "orientation": "h",
            "yref": "container",
            "yanchor": "bottom",
            "y": 0.0,
            "x": 0.0,
            "traceorder": "normal",
        },
    )
    return fig


def episodes_link(dist: Distribution, failure_class: FailureClass) -> str:
    """The Episodes page filtered to one run (and training step, for a step's counts) and
    class."""
    step = dist.train_step
    at = "" if step is None else f"&{nav.P_TRAIN_FROM}={step}&{nav.P_TRAIN_TO}={step}"
    return f"episodes?{nav.P_RUN}={dist.run_id}{at}&{P_CLASS}={failure_class}"


def side_plot_label(run: RunSummary) -> str:
    """A run's (or training step's) label in a chart: `plot_label`, and the step for a step."""
    step = "" if run.train_step is None else f" @ step {run.train_step}"
    return plot_label(run.id, run.name) + step


def column_names(a: RunSummary, b: RunSummary) -> tuple[str, str]:
    """The two sides' names in the table's headers, cut as chart labels are (a full long name
    widened every column past an 800 px window); told apart if cutting made them one."""
    name_a, name_b = short_name(a.label), short_name(b.label)
    return (f"{name_a} (A)", f"{name_b} (B)") if name_a == name_b else (name_a, name_b)


def shift_table(a: Distribution, b: Distribution, name_a: str, name_b: str) -> pd.DataFrame:
    """Per class: shares in each run and the change in percentage points (first, so a narrow
    window shows them), then the counts and the links to the episodes."""
    share_a, share_b = shares(a), shares(b)
    return pd.DataFrame(
        [
            {
                "class": FAILURE_LABELS[c],
                f"{name_a} share": share_a[c],
                f"{name_b} share": share_b[c],
                "change (points)": 100 * (share_b[c] - share_a[c]),
                f"{name_a} episodes": a.failure_counts.get(c, 0),
                f"{name_b} episodes": b.failure_counts.get(c, 0),
                f"open {name_a}": episodes_link(a, c),
                f"open {name_b}": episodes_link(b, c),
            }
            for c in FAILURE_CLASSES
        ]
    )


def show_shift(
    a: Distribution, b: Distribution, run_a: RunSummary, run_b: RunSummary, what: str
) -> None:
    """How the failure mix moved from run a to run b: a caption saying what the counts cover
    (`what`), a table and paired bars."""
    st.subheader("Failure classes")
    st.caption(what)
    name_a, name_b = column_names(run_a, run_b)
    table = shift_table(a, b, name_a, name_b)
    st.dataframe(
        table,
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        column_config={
            "class": st.column_config.TextColumn(pinned=True),
            f"{name_a} episodes": st.column_config.NumberColumn(format=COUNT_FORMAT),
            f"{name_b} episodes": st.column_config.NumberColumn(format=COUNT_FORMAT),
            f"{name_a} share": st.column_config.NumberColumn(format="percent"),
            f"{name_b} share": st.column_config.NumberColumn(format="percent"),
            "change (points)": st.column_config.NumberColumn(format="%+.1f"),
            f"open {name_a}": st.column_config.LinkColumn(display_text="episodes"),
            f"open {name_b}": st.column_config.LinkColumn(display_text="episodes"),
        },
    )
    labels = {a.key: side_plot_label(run_a), b.key: side_plot_label(run_b)}
    st.plotly_chart(mix_chart([a, b], labels), width="stretch")
