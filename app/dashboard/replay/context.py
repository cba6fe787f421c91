"""Where a replayed episode sits: the list it was opened from (back link, previous and next
episode), its run and outcome, and the episode a fork continues."""

from __future__ import annotations

from urllib.parse import parse_qs, parse_qsl

import streamlit as st

from app.dashboard import data
from app.dashboard.analysis import fork_source, steps_before
from app.dashboard.components import nav, params, run_list
from app.dashboard.components.colors import swatch
from app.dashboard.components.outcome import outcome_label
from app.dashboard.components.render import escape_markdown, show_error
from app.dashboard.episodes import query as episode_query
from app.dashboard.episodes import reads as list_reads
from app.dashboard.episodes.query import ListQuery, Neighbour
from app.dashboard.groups import reads as group_reads
from app.dashboard.groups.overview import group_query
from app.dashboard.replay import origin
from app.plural import counted
from app.render import fmt_num, fmt_signed
from storage.read_models import EpisodeDetail, GroupKey

ABANDONED = (
    ":material/logout: Abandoned: its player stopped before the episode ended (a client that "
    "left or began another, a rollout that ended without an answer, a server that stopped); "
    "every step it played is below."
)


def _list_of(detail: EpisodeDetail) -> tuple[ListQuery | None, str | None]:
    """The Episodes list this replay was opened from (the `from` parameter), if any."""
    qs = params.get_str(nav.P_FROM)
    if qs is None:
        return None, None
    # The list's runs are in its query string, not this page's link: an older one is offered.
    listed = parse_qs(qs).get(nav.P_RUN, [])
    runs = {r.id for r in run_list.offered(linked=listed)}
    query, problems = episode_query.from_query_string(qs, runs)
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


def show(detail: EpisodeDetail) -> None:
    """The back link and neighbours, the question, the run and outcome, a fork's origin."""
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
                    lambda q: list_reads.list_page(q, with_total=False), query, ep.id
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
    parts = [
        f"{swatch(run.id)} {escape_markdown(run.name)} #{run.id}",
        f"**{outcome_label(ep.outcome)}**",
        f"reward {fmt_num(ep.reward, 3)}",
        counted(ep.steps, "step"),
        # An import without --questions names no database: no "database ·" with nothing after.
        *([f"database {escape_markdown(ep.db_id)}"] if ep.db_id else []),
        f"question {escape_markdown(ep.question_id)}",
        f"sample {ep.sample_index}",
        *([f"training step {step}"] if (step := ep.train_step) is not None else []),
        *(
            [f"trainer's advantage {fmt_signed(advantage, 3)}"]
            if (advantage := detail.trainer_advantage) is not None
            else []
        ),
    ]
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):
        st.caption(" · ".join(parts), width="content")
        _group_link(detail)
    if ep.outcome == "abandoned":
        st.caption(ABANDONED)
    if ep.forked_from is not None:
        _fork_origin(detail)
    origin.show(detail)
    origin.show_replaced(detail)
    if detail.error:
        show_error(detail.error)


def _group_link(detail: EpisodeDetail) -> None:
    """A link to the episode's GRPO group (a trainer's group, its question's samples at its
    training step, else its question's samples in the run), when it has other members."""
    ep, run = detail.summary, detail.run
    key = GroupKey(ep.question_id, detail.group_index, ep.train_step)
    if data.group_size(run.id, key) < 2:
        return
    query = group_query(run.id, key, group_reads.by_step(run.id))
    st.page_link(
        nav.GROUPS, label="Its GRPO group", icon=":material/workspaces:", query_params=query
    )


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
