"""Replay: one episode step by step, with a step strip, keys, and its place in the list."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.header import header
from app.dashboard.components.render import show_error, show_text
from app.dashboard.replay import context, player, requery
from app.dashboard.replay.steps import show_rerun, show_step
from app.render import action_label, fmt_signed
from storage.read_models import EpisodeDetail


def _gold(detail: EpisodeDetail) -> None:
    if not st.toggle("Reveal gold SQL and answer", key="rp_reveal"):
        return
    gold = detail.gold_sql
    if gold is None:
        names_it = (
            "a Recorder's episode takes it as `gold_sql=`"
            if detail.run.source_format == "recorder"
            else "an imported run names it with `rollscope import --questions F --db-dir D`"
        )
        st.caption(f"This episode records no gold SQL ({names_it}).")
        return
    show_text(gold, language="sql")
    if not requery.can_run_sql(detail.run):
        st.caption("Not run: a Recorder's run names no databases.")
        return
    try:
        path = requery.db_path(detail.run, detail.summary.db_id)
        show_rerun(requery.run_query(path, gold, limits=requery.limits_of(detail.run.spec)))
    except (OSError, ValueError) as exc:
        show_error(str(exc))


def _transcript(detail: EpisodeDetail) -> None:
    with st.expander("Full transcript"):
        for step in detail.steps:
            action = action_label(step)
            st.markdown(f"**Step {step.step_no}** · {action} · reward {fmt_signed(step.reward, 3)}")
            show_step(step, kind=detail.run.kind, with_prompt=False)
            st.divider()


notices = header("Replay", copy_link=True, keys=player.KEYS, quiet=player.QUIET)
params.expect(nav.P_EPISODE, nav.P_STEP, nav.P_FROM)
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

context.show(detail)
if not detail.steps:
    params.show_notices(notices)
    # A finished episode of no steps could not begin (its database broke, its sandbox never
    # started); one still running has not played its first step.
    ended = detail.summary.outcome is not None
    st.info(
        "This episode ended before its first step." if ended else "This episode has no steps yet."
    )
    st.stop()
player.show(detail)
if detail.summary.answer is not None:
    st.caption("submitted answer")
    show_text(detail.summary.answer)
_gold(detail)
_transcript(detail)
params.show_notices(notices)  # after the player, whose step parameter may be one
