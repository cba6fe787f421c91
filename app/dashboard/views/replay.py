"""Replay: one episode step by step, with its gold query, reward timeline and transcript."""

from __future__ import annotations

import time

import streamlit as st

from app.dashboard import data, requery
from app.dashboard.components import charts, nav, params
from app.dashboard.components.render import escape_markdown, fmt_num, show_error, show_text
from app.dashboard.components.steps import rerun_button, show_rerun, show_step
from storage.read_models import EpisodeDetail

PLAY_SECONDS = 1.5


def _set_step(value: int) -> None:
    st.session_state["rp_step"] = value


def _toggle_play() -> None:
    st.session_state["rp_playing"] = not st.session_state.get("rp_playing", False)
    st.session_state["rp_tick"] = time.monotonic()


def _advance(n: int) -> None:
    # Runs on every fragment run; a step passes only when the timer (not a click) brought us here.
    now = time.monotonic()
    if now - st.session_state.get("rp_tick", 0.0) < PLAY_SECONDS * 0.8:
        return
    st.session_state["rp_tick"] = now
    if st.session_state["rp_step"] < n:
        st.session_state["rp_step"] += 1
    else:
        st.session_state["rp_playing"] = False
        st.rerun(scope="app")  # stops the fragment's timer


def _player(detail: EpisodeDetail) -> None:
    steps = detail.steps
    n = len(steps)
    if st.session_state.get("rp_playing"):
        _advance(n)
    cur = st.session_state["rp_step"]
    cols = st.columns([1, 1, 1, 1, 3])
    cols[0].button(
        "First", on_click=_set_step, args=(1,), disabled=cur <= 1, icon=":material/first_page:"
    )
    cols[1].button(
        "Prev",
        on_click=_set_step,
        args=(cur - 1,),
        disabled=cur <= 1,
        icon=":material/chevron_left:",
    )
    cols[2].button(
        "Next",
        on_click=_set_step,
        args=(cur + 1,),
        disabled=cur >= n,
        icon=":material/chevron_right:",
    )
    cols[3].button(
        "Last", on_click=_set_step, args=(n,), disabled=cur >= n, icon=":material/last_page:"
    )
    if n > 1:
        cols[4].slider(
            "Step", min_value=1, max_value=n, key="rp_step", label_visibility="collapsed"
        )
    cur = st.session_state["rp_step"]
    params.put(nav.P_STEP, cur)
    step = steps[cur - 1]
    st.subheader(f"Step {cur} of {n}: {step.action}")
    st.plotly_chart(charts.reward_timeline(steps, cur), width="stretch", key="rp_timeline")
    show_step(step)
    rerun_button(detail, step, key=f"rp_rerun_{cur}")


def _gold(detail: EpisodeDetail) -> None:
    if not st.toggle("Reveal gold SQL and answer", key="rp_reveal"):
        return
    show_text(detail.gold_sql, language="sql")
    try:
        path = requery.db_path(detail.run.spec, detail.summary.db_id)
        show_rerun(requery.run_query(path, detail.gold_sql))
    except (OSError, ValueError) as exc:
        show_error(str(exc))


def _transcript(detail: EpisodeDetail) -> None:
    with st.expander("Full transcript"):
        for step in detail.steps:
            st.markdown(f"**Step {step.step_no}** · {step.action} · reward {step.reward:+.3f}")
            show_step(step, with_prompt=False)
            st.divider()


st.title("Replay")
episode_id = params.get_int(nav.P_EPISODE)
detail = None if episode_id is None else data.get_episode(episode_id)
if detail is None:
    if episode_id is None:
        st.info("Pick an episode to replay on the Episodes page.")
    else:
        st.warning(f"No episode with id {episode_id} in this store.")
    st.page_link(nav.EPISODES, label="Browse episodes", icon=":material/table:")
    st.stop()

ep = detail.summary
st.markdown(escape_markdown(ep.question))
cols = st.columns(3)
cols[0].metric("outcome", ep.outcome or "playing")
cols[1].metric("reward", fmt_num(ep.reward, 3))
cols[2].metric("steps", ep.steps)
st.caption(f"database {ep.db_id} · question {ep.question_id} · sample {ep.sample_index}")
st.page_link(
    nav.EPISODES,
    label=f"Run {detail.run.name} (#{detail.run.id})",
    query_params={nav.P_RUN: str(detail.run.id)},
    icon=":material/arrow_back:",
)
if ep.answer is not None:
    st.caption("submitted answer")
    show_text(ep.answer)
if detail.error:
    show_error(detail.error)
_gold(detail)

n = len(detail.steps)
if n == 0:
    st.info("This episode has no steps yet.")
    st.stop()

# A new episode (or a link naming a step) positions the player; otherwise keep the user's step.
if st.session_state.get("rp_episode") != detail.summary.id or "rp_step" not in st.session_state:
    wanted = params.get_int(nav.P_STEP) or 1
    st.session_state["rp_step"] = min(max(1, wanted), n)
    st.session_state["rp_episode"] = detail.summary.id
    st.session_state["rp_playing"] = False
playing = bool(st.session_state.get("rp_playing"))
st.button(
    "Pause" if playing else "Play",
    on_click=_toggle_play,
    icon=":material/pause:" if playing else ":material/play_arrow:",
    disabled=n <= 1,
)
st.fragment(run_every=PLAY_SECONDS if playing else None)(_player)(detail)
_transcript(detail)
