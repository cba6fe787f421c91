"""Replay's step player: the buttons, the step strip, Play, and the step shown with its labels and
fork form. It redraws alone (a fragment) when a step changes."""

from __future__ import annotations

import time

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.params import Codec
from app.dashboard.fork import panel as fork_panel
from app.dashboard.replay import labels
from app.dashboard.replay.steps import chip, rerun_button, show_step
from app.dashboard.replay.timeline import reward_timeline
from app.render import action_label
from storage.read_models import EpisodeDetail

PLAY_SECONDS = 1.5
# Keys that step through an episode: the arrows, and j / k as in a pager.
KEYS = {"ArrowLeft": "rp_prev", "k": "rp_prev", "ArrowRight": "rp_next", "j": "rp_next"}
_PLAYING = "rp_playing"
_TIMED = "rp_timed"
"""Whether the fragment drawn last ticks on a timer (set when the whole page drew it)."""
_TICK = "rp_tick"
QUIET = (nav.P_STEP,)
"""Query parameters a step changes; browser Back skips them (see `browser.page_tools`)."""


def _step_key(detail: EpisodeDetail) -> str:
    # One widget per episode: a new episode starts from its link's step, not the last one's.
    return f"rp_step_{detail.summary.id}"


def _step_codec(n: int) -> Codec[int]:
    return params.choice(nav.P_STEP, range(1, n + 1), 1, "a step of this episode")


def _go(key: str, n: int, value: int) -> None:
    params.assign(key, nav.P_STEP, _step_codec(n), min(max(1, value), n))


def _toggle_play(key: str, n: int) -> None:
    playing = not st.session_state.get(_PLAYING, False)
    st.session_state[_PLAYING] = playing
    st.session_state[_TICK] = time.monotonic()
    if playing and st.session_state[key] >= n:
        _go(key, n, 1)  # Play at the last step plays the episode again


def _advance(key: str, n: int) -> None:
    # Runs on every fragment run; a step passes only when the timer (not a click) brought us here.
    now = time.monotonic()
    if now - st.session_state.get(_TICK, 0.0) < PLAY_SECONDS * 0.8:
        return
    st.session_state[_TICK] = now
    _go(key, n, st.session_state[key] + 1)
    if st.session_state[key] >= n:
        st.session_state[_PLAYING] = False


def _player(detail: EpisodeDetail) -> None:
    steps = detail.steps
    n = len(steps)
    key = _step_key(detail)
    bound = params.bind(key, nav.P_STEP, _step_codec(n))
    if st.session_state.get(_PLAYING):
        _advance(key, n)
    if bool(st.session_state.get(_PLAYING)) != st.session_state.get(_TIMED):
        # Play or Pause reran this fragment alone; its timer is set where the page draws it.
        st.rerun(scope="app")
    cur = st.session_state[key]
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        playing = bool(st.session_state.get(_PLAYING))
        st.button(
            "Pause" if playing else "Play",
            on_click=_toggle_play,
            args=(key, n),
            icon=":material/pause:" if playing else ":material/play_arrow:",
            disabled=n <= 1,
            key="rp_play",
        )
        for label, target, off, icon, widget in (
            ("First", 1, cur <= 1, ":material/first_page:", "rp_first"),
            ("Prev", cur - 1, cur <= 1, ":material/chevron_left:", "rp_prev"),
            ("Next", cur + 1, cur >= n, ":material/chevron_right:", "rp_next"),
            ("Last", n, cur >= n, ":material/last_page:", "rp_last"),
        ):
            st.button(
                label,
                on_click=_go,
                args=(key, n, target),
                disabled=off,
                icon=icon,
                key=widget,
                help=None if widget not in ("rp_prev", "rp_next") else "Keys: ← → or k j",
            )
    st.pills(
        "Steps",
        list(range(1, n + 1)),
        required=True,
        format_func=lambda no: chip(steps[no - 1]),
        label_visibility="collapsed",
        width="content",
        **bound,
    )
    cur = st.session_state[key]
    step = steps[cur - 1]
    st.subheader(f"Step {cur} of {n}: {action_label(step)}")
    show_step(step, kind=detail.run.kind)
    rerun_button(detail, step, key=f"rp_rerun_{cur}")
    with st.expander("Reward per step"):
        st.plotly_chart(reward_timeline(steps, cur), width="stretch", key="rp_timeline")
    # In the fragment: the label and fork forms act on the step shown, which it alone redraws.
    writable = data.settings().writes_allowed
    labels.show(detail, cur, writable)
    if writable:
        fork_panel.show(detail, cur)


def show(detail: EpisodeDetail) -> None:
    """The player of an episode with steps; it ticks on its own while Play is on."""
    if st.session_state.get("rp_episode") != detail.summary.id:
        st.session_state["rp_episode"] = detail.summary.id
        st.session_state[_PLAYING] = False
    playing = bool(st.session_state.get(_PLAYING))
    st.session_state[_TIMED] = playing
    st.fragment(run_every=PLAY_SECONDS if playing else None)(_player)(detail)
