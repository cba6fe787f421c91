"""Launch's view of a run it started (or one named in the link): progress, Cancel, the worker's
log, live until the run ends."""

from __future__ import annotations

import streamlit as st

from app import jobs
from app.dashboard import data
from app.dashboard.components import nav
from app.dashboard.components.render import show_error, show_text
from app.plural import counted
from app.render import episodes_text
from storage import lifecycle

_LOG_TAIL_BYTES = 4000
FOLLOWING = "ln_following"
"""The run Launch follows live (its fragment ticks until the run ends)."""


def _log_tail(run_id: int) -> str:
    path = jobs.worker_log_path(run_id)
    if not path.is_file():
        return ""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
        return fh.read().decode("utf-8", errors="replace")


def _follow(run_id: int) -> None:
    run = data.store().get_run(run_id)  # read now: the progress bar follows the worker
    if run is None:
        st.warning(f"No run with id {run_id} in this store.")
        return
    done = run.episodes_finished / run.plan if run.plan else 0.0
    st.progress(
        min(1.0, done),
        text=f"{run.name} (#{run.id}): {run.status}, {episodes_text(run)} episodes",
    )
    exit_code = jobs.worker_exit_code(run_id)
    if run.status in lifecycle.ACTIVE and exit_code is not None:
        st.error(
            f"The worker exited (code {exit_code}) while the run was {run.status}; see its log."
        )
        show_text(_log_tail(run_id))
        _stop_following(run_id)
        return
    if run.status in lifecycle.ACTIVE:
        if st.button("Cancel run", icon=":material/cancel:", key=f"cancel_{run_id}"):
            try:
                jobs.cancel_run(data.writer(), run_id)
                st.toast(f"Asked run {run_id} to stop.")
            except (ValueError, RuntimeError, OSError) as exc:
                show_error(str(exc))
    elif run.status == "completed":
        n = counted(run.episodes_finished, "episode")
        st.success(f"Completed: accuracy {run.accuracy or 0:.1%} over {n}.")
    else:
        st.error(f"Run ended {run.status}.")
        if run.error:
            show_text(run.error)
    st.page_link(nav.EPISODES, label="Episodes of this run", query_params={nav.P_RUN: str(run_id)})
    tail = _log_tail(run_id)
    if tail:
        with st.expander("Worker log"):
            show_text(tail)
    if run.status not in lifecycle.ACTIVE:
        _stop_following(run_id)


def _stop_following(run_id: int) -> None:
    # A full rerun drops the fragment's timer once the run has ended.
    if st.session_state.get(FOLLOWING) == run_id:
        st.session_state[FOLLOWING] = None
        st.rerun(scope="app")


def show(run_id: int) -> None:
    """The run, redrawn every second while it is active and its worker alive."""
    st.subheader("Run")
    live = st.session_state.get(FOLLOWING) == run_id or (
        (run := data.store().get_run(run_id)) is not None
        and run.status in lifecycle.ACTIVE
        and jobs.worker_exit_code(run_id) is None
    )
    if live:
        st.session_state[FOLLOWING] = run_id
    st.fragment(run_every=1.0 if live else None)(_follow)(run_id)
