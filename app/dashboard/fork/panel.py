"""Replay's "continue from this step with…": queue a fork of the episode and start its worker."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import jobs
from app.dashboard import data
from app.dashboard.analysis import steps_before
from app.dashboard.components import nav
from app.dashboard.components.render import escape_markdown
from app.dashboard.fork.form import MAX_TEMPERATURE, ForkForm, policy_choices, queue_fork
from app.dashboard.launch.form import FORM, OTHER_CHECKPOINT, LaunchError
from app.forks import not_forkable
from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from storage.engine import StoreError
from storage.read_models import EpisodeDetail

_ERRORS = "rp_fork_errors"
_STARTED = "rp_fork_started"


def _problem(field: str) -> None:
    message = st.session_state.get(_ERRORS, {}).get(field)
    if message:
        st.caption(f":red[:material/error: {escape_markdown(message)}]")


def _launch(episode_id: int, step: int) -> None:
    ss = st.session_state
    ss[_ERRORS] = {}
    settings = data.settings()
    form = ForkForm(
        policy=ss["rp_fork_policy"],
        temperature=float(ss["rp_fork_temperature"]),
        checkpoint=ss.get("rp_fork_checkpoint") or "",
    )
    try:
        run_id = queue_fork(data.writer(), episode_id, step, form, settings.checkpoint_roots)
    except LaunchError as exc:
        ss[_ERRORS] = exc.errors
        return
    except (StoreError, RuntimeError) as exc:  # the store refused the writer
        ss[_ERRORS] = {FORM: str(exc)}
        return
    pid = jobs.start_worker(settings.store_url, run_id)
    data.clear()
    ss[_STARTED] = (episode_id, step, run_id, pid)


def _source_settings(detail: EpisodeDetail) -> tuple[str, float]:
    """The source run's policy and temperature (the form's defaults)."""
    try:
        spec = RunSpec.from_stored(detail.run.spec)
    except SpecError:
        return detail.run.policy, 0.0
    policy = spec.policy
    if policy.startswith("hf:"):  # the choices list checkpoints by their resolved paths
        policy = f"hf:{Path(policy[3:]).expanduser().resolve()}"
    return policy, spec.generation.temperature


def _started(detail: EpisodeDetail) -> None:
    started = st.session_state.get(_STARTED)
    if not started or started[0] != detail.summary.id:
        return
    _, step, run_id, pid = started
    st.success(
        f"Fork run #{run_id} queued from step {step}; its worker (pid {pid}) is playing it.",
        icon=":material/call_split:",
    )
    with st.container(horizontal=True, gap="medium"):
        st.page_link(
            nav.LAUNCH,
            label=f"Follow run #{run_id}",
            icon=":material/monitoring:",
            query_params={nav.P_RUN: str(run_id)},
        )
        st.page_link(
            nav.COMPARE,
            label="Compare with this episode",
            icon=":material/compare_arrows:",
            query_params=[
                (nav.P_RUN, str(detail.run.id)),
                (nav.P_RUN, str(run_id)),
                (nav.P_QUESTION, detail.summary.question_id),
            ],
        )


def show(detail: EpisodeDetail, step: int) -> None:
    """The fork form for a finished episode at the step shown (a writable dashboard only); one
    line in its place for an episode rollscope cannot replay."""
    if why := not_forkable(detail.run):
        st.caption(f":material/call_split: Not forkable: {escape_markdown(why)}.")
        return
    st.subheader("Continue from this step with…")
    if detail.summary.outcome is None:
        st.caption("The episode is still being played; fork it once it finishes.")
        return
    settings = data.settings()
    choices = policy_choices(settings.checkpoint_roots)
    source_policy, source_temperature = _source_settings(detail)
    st.caption(
        f"A new run replays {steps_before(step)} of this episode exactly (same prompts, same "
        f"observations), then the chosen policy plays from step {step} on."
        if step > 1
        else "A new run plays this question again with the chosen policy from step 1."
    )
    with st.form("rp_fork", border=True):
        c1, c2 = st.columns([2, 1])
        with c1:
            st.selectbox(
                "Policy / checkpoint",
                choices,
                index=choices.index(source_policy) if source_policy in choices else 0,
                key="rp_fork_policy",
            )
            _problem("policy")
            st.text_input(
                f"Checkpoint directory (for {OTHER_CHECKPOINT!r})",
                placeholder="a folder with config.json, e.g. /models/ckpt-2000",
                key="rp_fork_checkpoint",
            )
            _problem("checkpoint")
        with c2:
            st.number_input(
                f"Temperature (0-{MAX_TEMPERATURE:g})",
                value=float(source_temperature),
                step=0.1,
                key="rp_fork_temperature",
            )
            _problem("temperature")
        st.form_submit_button(
            f"Continue from step {step}",
            icon=":material/call_split:",
            on_click=_launch,
            args=(detail.summary.id, step),
        )
        _problem(FORM)
    _started(detail)
