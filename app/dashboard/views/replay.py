"""Replay: one episode step by step, with a step strip, keys, and its place in the list."""

from __future__ import annotations

import time
from urllib.parse import parse_qsl

import streamlit as st

from app.dashboard import data, episode_query, requery
from app.dashboard.analysis import fork_source, steps_before
from app.dashboard.components import charts, fork_panel, labels, nav, params
from app.dashboard.components.colors import swatch
from app.dashboard.components.header import header
from app.dashboard.components.params import Codec
from app.dashboard.components.render import escape_markdown, fmt_num, show_error, show_text
from app.dashboard.components.steps import chip, rerun_button, show_rerun, show_step
from app.dashboard.episode_query import ListQuery, Neighbour
from storage.read_models import EpisodeDetail

PLAY_SECONDS = 1.5
# Keys that step through an episode: the arrows, and j / k as in a pager.
KEYS = {"ArrowLeft": "rp_prev", "k": "rp_prev", "ArrowRight": "rp_next", "j": "rp_next"}


def _step_key(detail: EpisodeDetail) -> str:
    # One widget per episode: a new episode starts from its link's step, not the last one's.
    return f"rp_step_{detail.summary.id}"


def _step_codec(n: int) -> Codec[int]:
    return params.choice(nav.P_STEP, range(1, n + 1), 1, f"a step of this episode (1-{n})")


def _go(key: str, n: int, value: int) -> None:
    params.assign(key, nav.P_STEP, _step_codec(n), min(max(1, value), n))


def _toggle_play(key: str, n: int) -> None:
    playing = not st.session_state.get("rp_playing", False)
    st.session_state["rp_playing"] = playing
    st.session_state["rp_tick"] = time.monotonic()
    if not playing:  # the URL follows the step once playing stops (each write is a history entry)
        _go(key, n, st.session_state[key])


def _advance(key: str, n: int) -> None:
    # Runs on every fragment run; a step passes only when the timer (not a click) brought us here.
    now = time.monotonic()
    if now - st.session_state.get("rp_tick", 0.0) < PLAY_SECONDS * 0.8:
        return
    st.session_state["rp_tick"] = now
    if st.session_state[key] < n:
        st.session_state[key] += 1
    else:
        st.session_state["rp_playing"] = False
        _go(key, n, n)
        st.rerun(scope="app")  # stops the fragment's timer


def _player(detail: EpisodeDetail) -> None:
    steps = detail.steps
    n = len(steps)
    key = _step_key(detail)
    bound = params.bind(key, nav.P_STEP, _step_codec(n))
    if st.session_state.get("rp_playing"):
        _advance(key, n)
    cur = st.session_state[key]
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        playing = bool(st.session_state.get("rp_playing"))
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
    st.subheader(f"Step {cur} of {n}: {step.action}")
    show_step(step)
    rerun_button(detail, step, key=f"rp_rerun_{cur}")
    with st.expander("Reward per step"):
        st.plotly_chart(charts.reward_timeline(steps, cur), width="stretch", key="rp_timeline")
    # In the fragment: the label and fork forms act on the step shown, which it alone redraws.
    writable = data.settings().writes_allowed
    labels.show(detail, cur, writable)
    if writable:
        fork_panel.show(detail, cur)


def _gold(detail: EpisodeDetail) -> None:
    if not st.toggle("Reveal gold SQL and answer", key="rp_reveal"):
        return
    show_text(detail.gold_sql, language="sql")
    try:
        path = requery.db_path(detail.run.spec, detail.summary.db_id)
        show_rerun(
            requery.run_query(path, detail.gold_sql, limits=requery.limits_of(detail.run.spec))
        )
    except (OSError, ValueError) as exc:
        show_error(str(exc))


def _transcript(detail: EpisodeDetail) -> None:
    with st.expander("Full transcript"):
        for step in detail.steps:
            st.markdown(f"**Step {step.step_no}** · {step.action} · reward {step.reward:+.3f}")
            show_step(step, with_prompt=False)
            st.divider()


def _list_of(detail: EpisodeDetail) -> tuple[ListQuery | None, str | None]:
    """The Episodes list this replay was opened from (the `from` parameter), if any."""
    qs = params.get_str(nav.P_FROM)
    if qs is None:
        return None, None
    query, problems = episode_query.from_query_string(qs, {r.id for r in data.list_runs()})
    for problem in problems:
        params.notice(f"In the list this replay came from: {problem}")
    return query, qs


def _open(neighbour: Neighbour) -> None:
    # Same page, new parameters: written here they make one history entry (a page link to the
    # page already shown would not change the address).
    params.write(nav.P_STEP, [])
    params.write(nav.P_EPISODE, [str(neighbour.episode_id)])
    params.write(nav.P_FROM, [episode_query.to_query_string(neighbour.query)])


def _neighbour_button(label: str, icon: str, neighbour: Neighbour | None, key: str) -> None:
    st.button(
        label,
        icon=icon,
        disabled=neighbour is None,
        on_click=None if neighbour is None else _open,
        args=None if neighbour is None else (neighbour,),
        key=key,
        type="tertiary",
    )


def _header(detail: EpisodeDetail) -> None:
    ep, run = detail.summary, detail.run
    query, qs = _list_of(detail)
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):
        if query is not None and qs is not None:
            st.page_link(
                nav.EPISODES,
                label="Back to the list",
                icon=":material/arrow_back:",
                query_params=parse_qsl(qs),
            )
            try:
                before, after = episode_query.neighbours(
                    lambda q: data.list_page(q, with_total=False), query, ep.id
                )
            except ValueError:  # a cursor of the list that no longer reads
                before = after = None
            _neighbour_button("Previous episode", ":material/skip_previous:", before, "rp_before")
            _neighbour_button("Next episode", ":material/skip_next:", after, "rp_after")
        else:
            st.page_link(
                nav.EPISODES,
                label=f"Episodes of {run.name}",
                icon=":material/arrow_back:",
                query_params={nav.P_RUN: str(run.id)},
            )
    st.markdown(escape_markdown(ep.question))
    outcome = ep.outcome or "playing"
    st.caption(
        f"{swatch(run.id)} {escape_markdown(run.name)} #{run.id} · **{outcome}** · reward "
        f"{fmt_num(ep.reward, 3)} · {ep.steps} steps · database {escape_markdown(ep.db_id)} · "
        f"question {escape_markdown(ep.question_id)} · sample {ep.sample_index}"
    )
    if ep.forked_from is not None:
        _fork_origin(detail)
    if detail.error:
        show_error(detail.error)


def _fork_origin(detail: EpisodeDetail) -> None:
    """Where a fork's episode comes from, with links to its source and to both side by side."""
    ep = detail.summary
    fork = fork_source(detail.run)
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):
        st.caption(
            f":material/call_split: continues episode {ep.forked_from} from step {ep.fork_step}: "
            f"{steps_before(ep.fork_step or 1)} replayed as recorded",
            width="content",
        )
        st.page_link(
            nav.REPLAY,
            label=f"Replay episode {ep.forked_from}",
            icon=":material/replay:",
            query_params={nav.P_EPISODE: str(ep.forked_from)},
        )
        if fork is not None:
            st.page_link(
                nav.COMPARE,
                label="Compare with the original",
                icon=":material/compare_arrows:",
                query_params=[
                    (nav.P_RUN, str(fork)),
                    (nav.P_RUN, str(detail.run.id)),
                    (nav.P_QUESTION, ep.question_id),
                ],
            )


notices = header("Replay", copy_link=True, keys=KEYS)
episode_id = params.get_id(nav.P_EPISODE, "an episode id")
detail = None if episode_id is None else data.get_episode(episode_id)
if detail is None:
    if episode_id is not None:
        params.notice(f"No episode with id {episode_id} in this store.")
    elif params.get_str(nav.P_EPISODE) is None:
        st.info("Pick an episode to replay on the Episodes page.")
    params.show_notices(notices)
    st.page_link(nav.EPISODES, label="Browse episodes", icon=":material/table:")
    st.stop()

_header(detail)
n = len(detail.steps)
if n == 0:
    params.show_notices(notices)
    st.info("This episode has no steps yet.")
    st.stop()
if st.session_state.get("rp_episode") != detail.summary.id:
    st.session_state["rp_episode"] = detail.summary.id
    st.session_state["rp_playing"] = False
playing = bool(st.session_state.get("rp_playing"))
st.fragment(run_every=PLAY_SECONDS if playing else None)(_player)(detail)
if detail.summary.answer is not None:
    st.caption("submitted answer")
    show_text(detail.summary.answer)
_gold(detail)
_transcript(detail)
params.show_notices(notices)  # after the player, whose step parameter may be one
