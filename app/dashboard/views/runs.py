"""Runs: one row per run with its metrics, live progress, and charts of the runs' results."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import data
from app.dashboard.components import charts, failure_mix, nav
from app.dashboard.components.render import fmt_duration, fmt_time
from storage import lifecycle
from storage.read_models import RunSummary

NO_RUNS = "No runs yet - run `rollscope run --policy oracle --dataset demo` to record one."


def _rows(runs: list[RunSummary]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "id": r.id,
                "name": r.name,
                "checkpoint": r.checkpoint or "-",
                "policy": r.policy,
                "dataset": r.dataset,
                "status": r.status,
                "progress": r.episodes_finished / r.episodes_planned if r.episodes_planned else 0.0,
                "episodes": r.episodes_finished,
                "planned": r.episodes_planned,
                "accuracy": r.accuracy,
                "mean reward": r.mean_reward,
                "mean steps": r.mean_steps,
                "parse failures": r.parse_failure_rate,
                "started": fmt_time(r.started_at),
                "duration": fmt_duration(r.duration_seconds),
                "episodes link": f"episodes?{nav.P_RUN}={r.id}",
            }
            for r in runs
        ]
    )


def _progress(run_ids: list[int]) -> None:
    for run_id in run_ids:
        run = data.get_run_uncached(run_id)
        if run is None:
            continue
        done = run.episodes_finished / run.episodes_planned if run.episodes_planned else 0.0
        st.progress(
            min(1.0, done),
            text=f"{run.name}: {run.status}, "
            f"{run.episodes_finished}/{run.episodes_planned} episodes",
        )


st.title("Runs")
runs = data.list_runs()
if not runs:
    st.info(NO_RUNS)
    st.stop()

active = [r.id for r in runs if r.status in lifecycle.ACTIVE]
if active:
    st.subheader("In progress")
    # Only this part reruns every 2 s; the table and charts below stay as they are.
    st.fragment(run_every=2.0)(_progress)(active)

st.dataframe(
    _rows(runs),
    hide_index=True,
    width="stretch",
    column_config={
        "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0),
        "accuracy": st.column_config.NumberColumn(format="percent"),
        "parse failures": st.column_config.NumberColumn(format="percent"),
        "mean reward": st.column_config.NumberColumn(format="%.3f"),
        "mean steps": st.column_config.NumberColumn(format="%.2f"),
        "episodes link": st.column_config.LinkColumn("open", display_text="episodes"),
    },
)

cols = st.columns(min(4, len(runs)))
for col, run in zip(cols, runs[:4], strict=False):
    with col:
        st.page_link(
            nav.EPISODES, label=f"Episodes of {run.name}", query_params={nav.P_RUN: str(run.id)}
        )
if len(runs) >= 2:
    st.page_link(
        nav.COMPARE,
        label=f"Compare {runs[1].name} and {runs[0].name}",
        icon=":material/compare:",
        query_params=[(nav.P_RUN, str(runs[1].id)), (nav.P_RUN, str(runs[0].id))],
    )

names = {r.id: f"{r.name} (#{r.id})" for r in runs}
finished = [r for r in runs if r.episodes_finished > 0]
if finished:
    dists = data.run_distributions([r.id for r in finished])
    left, right = st.columns(2)
    left.plotly_chart(charts.accuracy_and_reward(finished), width="stretch")
    right.plotly_chart(charts.action_mix(dists, names), width="stretch")
    left.plotly_chart(charts.reward_distribution(dists, names), width="stretch")
    right.plotly_chart(charts.steps_distribution(dists, names), width="stretch")
    left.plotly_chart(failure_mix.mix_chart(dists, names), width="stretch")
