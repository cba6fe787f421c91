"""Runs: one row per run, live while runs play; the runs a user selects drive charts and links."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params, run_list
from app.dashboard.components.header import header
from app.dashboard.components.new_runs import no_runs_yet, watch_for_new_runs
from app.dashboard.components.render import escape_markdown
from app.dashboard.failures import mix as failure_mix
from app.dashboard.runs import charts, links, reads
from app.dashboard.runs import table as run_table
from app.plural import counted
from app.render import episodes_text
from storage import lifecycle
from storage.read_models import RunKey, RunSummary

LIVE_SECONDS = 2.0
CHART_RUNS = 20  # runs charted when none are selected: the newest (charts hold about 20)
_SEEN = "runs_selection_seen"
_GENERATION = "runs_table_generation"
_CHARTED = "runs_charted_selection"  # the `run` values the charts below the table were drawn for


def _selection(known: set[int]) -> list[int]:
    """The selected runs: the URL's `run` parameters."""
    values = params.raw(nav.P_RUN)
    chosen, problems = params.ids(nav.P_RUN, known).parse(values)
    for problem in problems:
        params.notice(problem)
    if st.session_state.get(_SEEN) != values:
        # Changed from outside (a link, browser Back): a fresh table shows the new selection.
        st.session_state[_SEEN] = values
        st.session_state[_GENERATION] = st.session_state.get(_GENERATION, 0) + 1
    return chosen


def _select(run_ids: list[int]) -> None:
    before, _ = params.ids(nav.P_RUN, run_ids).parse(params.raw(nav.P_RUN))
    params.write(nav.P_RUN, [str(i) for i in links.tick_order(before, run_ids)])
    st.session_state[_SEEN] = params.raw(nav.P_RUN)


def _follow_selection() -> None:
    """Rerun the whole page when the charts show another selection than the URL's.

    A tick in the table reruns only the live fragment; asking for the full rerun from the
    fragment's body (not from the table's callback) also catches a request a timer tick of the
    fragment swallowed, on the next tick.
    """
    if st.session_state.get(_CHARTED) != params.raw(nav.P_RUN):
        st.rerun()


def _progress(runs: list[RunSummary]) -> None:
    active = [r for r in runs if r.status in lifecycle.ACTIVE]
    if not active:
        return
    st.subheader("In progress")
    for run in active:
        done = run_table.progress_of(run)
        if done is None:  # no plan to measure against: no bar, a count
            served = {
                "env": " (an env-server run: episodes come as clients play them)",
                "import": " (an import: episodes come as the trainer writes files)",
            }.get(run.kind, "")
            text = f"{run.name}: {run.status}, {counted(run.episodes_finished, 'episode')}"
            st.markdown(escape_markdown(text) + served)
            continue
        st.progress(
            min(1.0, done),
            text=f"{run.name}: {run.status}, {episodes_text(run)} episodes",
        )


def _live(active: bool) -> None:
    # A live table re-reads the store on every tick; its rows then match the progress bars.
    runs = run_list.offered(fresh=active)
    by_id = {r.id: r for r in runs}
    chosen = [i for i in _selection(set(by_id)) if i in by_id]
    _progress(runs)
    if active:
        st.caption(f"Refreshed every {LIVE_SECONDS:.0f} s while runs play.")
    run_table.show(
        runs,
        chosen,
        key=run_table.table_key(runs, st.session_state.get(_GENERATION, 0)),
        on_select=_select,
    )
    links.show([by_id[i] for i in chosen])
    _follow_selection()


def _charted(runs: list[RunSummary], chosen: list[int]) -> tuple[list[RunSummary], str]:
    """The runs to chart and the caption that says which: the selected ones, else the newest
    with enough episodes to mean something."""
    played = [r for r in runs if r.episodes_finished > 0]
    if chosen:
        shown = [r for r in played if r.id in chosen]
        return shown, f"Charts of the {counted(len(shown), 'selected run')}."
    shown = [r for r in played if r.episodes_finished >= charts.FEW_EPISODES][:CHART_RUNS]
    few = sum(1 for r in played if r.episodes_finished < charts.FEW_EPISODES)
    left_out = f" ({few} with fewer are left out)" if few else ""
    return shown, (
        f"Charts of the {len(shown)} newest runs with {charts.FEW_EPISODES} or more "
        f"episodes{left_out}; select runs to choose."
    )


INTERVAL_NOTE = (
    "Accuracy's 95% interval here counts each episode a trial (Wilson); Compare and the "
    "Question map resample questions instead, wider for a run of few questions asked many "
    "times."
)


def _charts(runs: list[RunSummary], chosen: list[int]) -> None:
    shown, caption = _charted(runs, chosen)
    if not shown:
        return
    st.caption(caption + " " + INTERVAL_NOTE)
    if undrawn := charts.undrawn_rewards(shown):  # its chart would be empty without a word
        st.caption(undrawn)
    by_id = {r.id: r for r in shown}
    dists = reads.run_distributions(tuple(r.id for r in shown))
    left, right = st.columns(2)
    left.plotly_chart(charts.accuracy(shown), width="stretch", key="runs_accuracy")
    right.plotly_chart(charts.mean_reward(shown), width="stretch", key="runs_reward")
    left.plotly_chart(charts.reward_strip(dists, by_id), width="stretch", key="runs_rspread")
    right.plotly_chart(charts.steps_spread(dists, by_id), width="stretch", key="runs_sspread")
    st.plotly_chart(charts.action_mix(dists, by_id), width="stretch", key="runs_mix")
    names: dict[RunKey, str] = {r.id: charts.run_label(r) for r in shown}
    st.plotly_chart(failure_mix.mix_chart(dists, names), width="stretch", key="runs_classes")


notices = header("Runs", copy_link=True)
params.expect(nav.P_RUN)
runs = run_list.offered()
any_active = any(r.status in lifecycle.ACTIVE for r in runs)
if not runs:
    no_runs_yet()
if not any_active:
    watch_for_new_runs(runs[0].id)

st.session_state[_CHARTED] = params.raw(nav.P_RUN)  # before the fragment: no rerun in a full run
st.fragment(run_every=LIVE_SECONDS if any_active else None)(_live)(any_active)
if (older := run_list.older_note(len(data.list_runs()))) is not None:
    st.caption(older)
params.show_notices(notices)
selected, _ = params.ids(nav.P_RUN, {r.id for r in runs}).parse(params.raw(nav.P_RUN))
_charts(runs, selected)
