"""Episodes: filter, sort and page through episodes on the server; one click opens a replay."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from app.dashboard import data, episode_query
from app.dashboard.components import nav, params
from app.dashboard.components.browser import follow
from app.dashboard.components.export import export_menu
from app.dashboard.components.header import header
from app.dashboard.episode_query import PAGE_SIZES, SORTS, ListQuery
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.records import FAILURE_CLASSES, OUTCOMES
from storage.read_models import EpisodeSummary, Page
from storage.reads import TEXT_SEARCH_NEWEST

_OPEN = "ep_open"
_OPENING = "ep_opening"


def _first_page() -> None:
    # A changed filter or order starts again from the first page.
    params.write(nav.P_CURSOR, [])


def _bound(key: str, known: set[int]) -> dict[str, Any]:
    f = episode_query.BY_KEY[key]
    return params.bind(f.key, f.param, f.codec(known), on_change=_first_page)


def _filters(run_names: dict[int, str]) -> None:
    known = set(run_names)
    with st.container(border=True):
        c1, c2, c3, c4 = st.columns([2, 1, 1, 2])
        c1.multiselect(
            "Runs",
            list(run_names),
            format_func=lambda i: run_names.get(i, str(i)),
            placeholder="all runs",
            **_bound("ep_runs", known),
        )
        # Short placeholders: at 800 px these columns are ~120 px wide ("Choose options" clipped).
        c2.multiselect("Outcome", list(OUTCOMES), placeholder="any", **_bound("ep_outcomes", known))
        c2.multiselect(
            "Failure class",
            FAILURE_CLASSES,
            format_func=FAILURE_LABELS.__getitem__,
            placeholder="any",
            **_bound("ep_classes", known),
        )
        dbs = _bound("ep_dbs", known)
        options = data.db_ids(st.session_state["ep_runs"])
        extra = [d for d in st.session_state["ep_dbs"] if d not in options]
        c3.multiselect(
            "Database", options + extra, accept_new_options=True, placeholder="any", **dbs
        )
        tags = _bound("ep_tags", known)
        in_use = [t.tag for t in data.tag_counts(st.session_state["ep_runs"])]
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
            st.selectbox(
                "SQL error", list(params.TRISTATE), width=110, **_bound("ep_sqlerr", known)
            )
            st.selectbox(
                "Unparsed", list(params.TRISTATE), width=110, **_bound("ep_unparsed", known)
            )
            st.selectbox("Sort by", SORTS, width=150, **_bound("ep_sort", known))
            st.toggle("Descending", **_bound("ep_desc", known))
            st.selectbox("Page size", PAGE_SIZES, width=100, **_bound("ep_size", known))


def _window(page: Page[EpisodeSummary]) -> str:
    """What a search bounded to the newest episodes left out, for the list's caption."""
    if page.text_window is None:
        return ""
    return (
        f" (searched the newest {page.text_window:,} episodes; "
        "tick **Search all episodes** for older ones)"
    )


def _go_to(cursors: list[str]) -> None:
    params.write(nav.P_CURSOR, cursors)


def _rows(items: list[EpisodeSummary]) -> pd.DataFrame:
    # What a reader compares comes first; the long question text and answer last.
    tags = data.episode_tags([e.id for e in items])
    return pd.DataFrame(
        [
            {
                "open": ":material/play_arrow: open",
                "run": e.run_name,
                "outcome": e.outcome or "playing",
                "reward": e.reward,
                "steps": e.steps,
                "class": FAILURE_LABELS[e.failure_class] if e.failure_class else None,
                "tags": tags.get(e.id, []),
                "question id": e.question_id,
                "sample": e.sample_index,
                "SQL error": e.has_sql_error,
                "unparsed": e.has_unparsed,
                "database": e.db_id,
                "question": e.question,
                "answer": e.answer,
                "seconds": e.duration_seconds,
                "id": e.id,
            }
            for e in items
        ],
        columns=[
            "open",
            "run",
            "outcome",
            "reward",
            "steps",
            "class",
            "tags",
            "question id",
            "sample",
            "SQL error",
            "unparsed",
            "database",
            "question",
            "answer",
            "seconds",
            "id",
        ],
    )


def _clicked(episode_ids: list[int]) -> None:
    click = st.session_state.get(_OPEN)
    if click is not None and 0 <= click["row"] < len(episode_ids):
        st.session_state[_OPENING] = episode_ids[click["row"]]


def _table(page: Page[EpisodeSummary], query: ListQuery) -> None:
    ids = [e.id for e in page.items]
    st.dataframe(
        _rows(page.items),
        hide_index=True,
        width="stretch",
        column_config={
            "open": st.column_config.ButtonColumn(
                "", type="tertiary", on_click=_clicked, args=(ids,), key=_OPEN, pinned=True
            ),
            "tags": st.column_config.ListColumn(width=120),
            "reward": st.column_config.NumberColumn(format="%.3f"),
            "seconds": st.column_config.NumberColumn(format="%.2f"),
            "question": st.column_config.TextColumn(width="medium"),
        },
    )


notices = header("Episodes", copy_link=True)
opening = st.session_state.pop(_OPENING, None)
runs = data.list_runs()
if not runs:
    st.info("No runs yet - run `rollscope run --policy oracle --dataset demo` to record one.")
    st.stop()

run_names = {r.id: f"{r.name} (#{r.id})" for r in runs}
_filters(run_names)
query = episode_query.from_values(st.session_state.to_dict(), tuple(params.get_all(nav.P_CURSOR)))
if opening is not None:
    # The row's "open" button: Replay gets this list, for its back link and prev/next. A page
    # link (clicked by the browser) rather than st.switch_page: see `browser.follow`.
    with st.container(key="ep_open_link"):
        st.page_link(
            nav.REPLAY,
            label=f"Opening the replay of episode {opening}...",
            icon=":material/replay:",
            query_params={
                nav.P_EPISODE: str(opening),
                nav.P_FROM: episode_query.to_query_string(query),
            },
        )
    follow("ep_open_link", str(opening))
try:
    page = data.list_page(query)
except ValueError as exc:  # a cursor cut or edited by hand, or made for another order
    params.notice(f"The link's page cursor is not valid here ({exc}); showing the first page.")
    query = dataclasses.replace(query, cursors=())
    page = data.list_page(query)
params.show_notices(notices)

start = len(query.cursors) * query.size
total = "?" if page.total is None else f"{page.total:,}{'+' if page.total_capped else ''}"
head, tools = st.columns([4, 1], vertical_alignment="center")
with tools:
    export_menu(query.flt, page.total, {r.id: r.name for r in runs}, at_least=page.total_capped)
if not page.items:
    none = "No episodes match these filters" if not query.cursors else "No more episodes"
    head.info(f"{none}{_window(page)}.")
else:
    head.caption(
        f"Episodes {start + 1}-{start + len(page.items)} of {total}{_window(page)}. "
        "**open** replays an episode; Replay keeps this list for its back link."
    )
    _table(page, query)

pager = st.container(horizontal=True, gap="small")  # buttons at their own width, never clipped
pager.button(
    "Previous",
    disabled=not query.cursors,
    on_click=_go_to,
    args=(list(query.cursors[:-1]),),
    icon=":material/chevron_left:",
)
pager.button(
    "Next",
    disabled=page.next_cursor is None,
    on_click=_go_to,
    args=([*query.cursors, page.next_cursor or ""],),
    icon=":material/chevron_right:",
)
