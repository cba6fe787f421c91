"""The Episodes filters: one bordered form, each control bound to its query parameter; a
changed filter or order starts again from the first page."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.dashboard.components import nav, params
from app.dashboard.episodes import query as episode_query
from app.dashboard.episodes import reads
from app.dashboard.episodes.query import PAGE_SIZES, SORTS
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.records import FAILURE_CLASSES, OUTCOMES
from storage.reads import TEXT_SEARCH_NEWEST


def _first_page() -> None:
    # A changed filter or order starts again from the first page.
    params.write(nav.P_CURSOR, [])


def _bound(key: str, known: set[int]) -> dict[str, Any]:
    f = episode_query.BY_KEY[key]
    return params.bind(f.key, f.param, f.codec(known), on_change=_first_page)


def show(run_names: dict[int, str]) -> None:
    """The filter form; each control reads and writes its query parameter."""
    known = set(run_names)
    with st.container(border=True):
        # A row of its own: a chip per run does not wrap, and in a column at 800 px the
        # second run's chip was cut.
        st.multiselect(
            "Runs",
            list(run_names),
            format_func=lambda i: run_names.get(i, str(i)),
            placeholder="all runs",
            **_bound("ep_runs", known),
        )
        c2, c3, c4 = st.columns([1, 1, 2])
        # Short placeholders: in a narrow window these columns are too narrow for Streamlit's.
        c2.multiselect("Outcome", list(OUTCOMES), placeholder="any", **_bound("ep_outcomes", known))
        c2.multiselect(
            "Failure class",
            FAILURE_CLASSES,
            format_func=FAILURE_LABELS.__getitem__,
            placeholder="any",
            **_bound("ep_classes", known),
        )
        dbs = _bound("ep_dbs", known)
        options = reads.db_ids(tuple(st.session_state["ep_runs"]))
        extra = [d for d in st.session_state["ep_dbs"] if d not in options]
        c3.multiselect(
            "Database", options + extra, accept_new_options=True, placeholder="any", **dbs
        )
        tags = _bound("ep_tags", known)
        in_use = [t.tag for t in reads.tag_counts(tuple(st.session_state["ep_runs"]))]
        extra = [t for t in st.session_state["ep_tags"] if t not in in_use]
        c3.multiselect(
            "Tag",
            in_use + extra,
            accept_new_options=True,
            placeholder="any",
            help="Episodes labelled (on the episode or a step) with any of these tags",
            **tags,
        )
        c4.text_input("Search question, gold SQL and output", **_bound("ep_text", known))
        c4.checkbox(
            "Search all episodes",
            help=f"A search reads the newest {TEXT_SEARCH_NEWEST:,} episodes that match the other "
            "filters; tick this to read every one (seconds on a store of millions of steps).",
            **_bound("ep_text_all", known),
        )
        # Fixed widths in a wrapping row: at 800 px the controls move to a second line
        # instead of being squeezed until their labels are cut.
        with st.container(horizontal=True, gap="small", vertical_alignment="bottom"):
            st.number_input(
                "Min reward", value=None, step=0.1, width=130, **_bound("ep_rmin", known)
            )
            st.number_input(
                "Max reward", value=None, step=0.1, width=130, **_bound("ep_rmax", known)
            )
            st.number_input(
                "Min steps", value=None, min_value=0, step=1, width=120, **_bound("ep_smin", known)
            )
            st.number_input(
                "Max steps", value=None, min_value=0, step=1, width=120, **_bound("ep_smax", known)
            )
            for key, label in (("ep_tmin", "From training step"), ("ep_tmax", "To training step")):
                st.number_input(
                    label,
                    value=None,
                    min_value=0,
                    step=1,
                    width=150,
                    help="The step of the training run the episode was played at",
                    **_bound(key, known),
                )
            st.selectbox(
                "SQL error",
                list(params.TRISTATE),
                width=110,
                help="A query of the episode failed in rollscope's environment. Episodes whose "
                "SQL did not run here (a Recorder's, an import's without --questions) match "
                "neither yes nor no: nobody here knows",
                **_bound("ep_sqlerr", known),
            )
            st.selectbox(
                "Unparsed", list(params.TRISTATE), width=110, **_bound("ep_unparsed", known)
            )
            st.selectbox("Sort by", SORTS, width=150, **_bound("ep_sort", known))
            st.toggle("Descending", **_bound("ep_desc", known))
            st.selectbox("Page size", PAGE_SIZES, width=100, **_bound("ep_size", known))
