"""Question map: success per question and run as a heatmap, the questions each run lost or
gained against the one before, and accuracy across the runs with confidence intervals."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import analysis_data, data
from app.dashboard.analysis import BOOTSTRAP_RESAMPLES, SOLVED_RATE
from app.dashboard.components import nav, params
from app.dashboard.components.header import header
from app.dashboard.components.map_charts import accuracy_line, cell_of, heatmap
from app.dashboard.question_map import PairFlips
from storage.read_models import RunSummary


def _compare_link(before: int, after: int, question_id: str) -> str:
    return f"compare?{nav.P_RUN}={before}&{nav.P_RUN}={after}&{nav.P_QUESTION}={question_id}"


def _heatmap(view: analysis_data.MapView, names: list[str]) -> None:
    qmap = view.qmap
    st.caption(
        f"{len(qmap.question_ids)} questions, easiest at the top (mean success over the runs). "
        "Grey: not played. Hover a cell for the question; click it to open its episodes."
    )
    event = st.plotly_chart(
        heatmap(qmap, names),
        width="stretch",
        key="map_heatmap",
        on_select="rerun",
        selection_mode="points",
    )
    points = event.selection.points if event is not None else []
    if points and "point_index" in points[0]:
        run_id, question_id = cell_of(qmap, int(points[0]["point_index"]))
        st.switch_page(
            nav.GROUPS, query_params={nav.P_RUN: str(run_id), nav.P_QUESTION: question_id}
        )


def _flips(pairs: list[PairFlips], by_id: dict[int, RunSummary]) -> None:
    st.subheader("Flips between consecutive runs")
    st.caption(
        f"A run solves a question with a success rate of {SOLVED_RATE:.0%} or more; a "
        "regression is a question the run before solved and this one does not."
    )
    summary = pd.DataFrame(
        [
            {
                "from": by_id[p.run_before].name,
                "to": by_id[p.run_after].name,
                "regressions": len(p.regressions),
                "improvements": len(p.improvements),
                "net": len(p.improvements) - len(p.regressions),
                "shared questions": p.shared,
            }
            for p in pairs
        ]
    )
    st.dataframe(summary, hide_index=True, width="stretch")
    labels = [f"{by_id[p.run_before].name} → {by_id[p.run_after].name}" for p in pairs]
    chosen = st.selectbox(
        "Flips of", range(len(pairs)), format_func=labels.__getitem__, key="map_pair"
    )
    pair = pairs[chosen]
    rows = [
        {
            "question id": f.question_id,
            "flip": kind,
            f"{by_id[pair.run_before].name}": f.rate_before,
            f"{by_id[pair.run_after].name}": f.rate_after,
            "compare": _compare_link(pair.run_before, pair.run_after, f.question_id),
        }
        for kind, flips in (("regression", pair.regressions), ("improvement", pair.improvements))
        for f in flips
    ]
    if not rows:
        st.info("No question changed between these two runs.")
        return
    event = st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        on_select="rerun",
        selection_mode="single-row",
        key=f"map_flips_{chosen}",
        column_config={
            by_id[pair.run_before].name: st.column_config.NumberColumn(format="percent"),
            by_id[pair.run_after].name: st.column_config.NumberColumn(format="percent"),
            "compare": st.column_config.LinkColumn("episodes", display_text="side by side"),
        },
    )
    selected = event.selection.rows if event is not None else []
    if selected:
        row = rows[selected[0]]
        st.switch_page(
            nav.COMPARE,
            query_params=[
                (nav.P_RUN, str(pair.run_before)),
                (nav.P_RUN, str(pair.run_after)),
                (nav.P_QUESTION, str(row["question id"])),
            ],
        )


notices = header("Question map", copy_link=True)
runs = data.list_runs()
if len(runs) < 2:
    st.info("The map needs two runs on the same questions - record them with `rollscope run`.")
    st.stop()
by_id = {r.id: r for r in runs}
chosen_ids: list[int] = st.multiselect(
    "Runs, in order (checkpoints oldest first)",
    list(by_id),
    format_func=lambda i: f"{by_id[i].name} (#{i})",
    **params.bind("map_runs", nav.P_RUN, params.ids(nav.P_RUN, by_id)),
)
params.show_notices(notices)
if len(chosen_ids) < 2:
    st.info("Choose two or more runs, in the order to read them (e.g. checkpoints by step).")
    st.stop()

view = analysis_data.map_view(chosen_ids)
if not view.qmap.question_ids:
    st.info("These runs have no finished episodes yet.")
    st.stop()
names = [by_id[i].name for i in chosen_ids]
_heatmap(view, names)
# Full width, one under the other: side by side, a narrow window cut the chart's title and
# turned its run names on end.
st.plotly_chart(
    accuracy_line(analysis_data.map_accuracy(chosen_ids), names),
    width="stretch",
    key="map_accuracy",
)
st.caption(
    f"Paired over questions: {BOOTSTRAP_RESAMPLES} resamples of the questions each run "
    "played, the same draws for every run."
)
_flips(view.flips, by_id)
