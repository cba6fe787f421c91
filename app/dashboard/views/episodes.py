"""Episodes: filter, sort and page through episodes on the server; a row opens its replay."""

from __future__ import annotations

from typing import get_args

import pandas as pd
import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.failure_mix import P_CLASS
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.records import FAILURE_CLASSES, OUTCOMES
from storage.read_models import EpisodeFilter, EpisodeSort, EpisodeSummary

PAGE_SIZES = (10, 25, 50, 100, 200)
SORTS: tuple[EpisodeSort, ...] = get_args(EpisodeSort)
_TRISTATE = {"any": None, "yes": True, "no": False}


def _tristate_name(value: bool | None) -> str:
    return next(k for k, v in _TRISTATE.items() if v is value)


def _seed_widgets_from_url() -> None:
    params.init_state("ep_runs", params.get_ints(nav.P_RUN))
    params.init_state("ep_outcomes", [o for o in params.get_all("outcome") if o in OUTCOMES])
    params.init_state("ep_classes", [c for c in params.get_all(P_CLASS) if c in FAILURE_CLASSES])
    params.init_state("ep_dbs", params.get_all("db"))
    params.init_state("ep_text", params.get_str("q") or "")
    params.init_state("ep_rmin", params.get_float("rmin"))
    params.init_state("ep_rmax", params.get_float("rmax"))
    params.init_state("ep_smin", params.get_int("smin"))
    params.init_state("ep_smax", params.get_int("smax"))
    params.init_state("ep_sqlerr", _tristate_name(params.get_bool("sqlerr")))
    params.init_state("ep_unparsed", _tristate_name(params.get_bool("unparsed")))
    sort = params.get_str("sort")
    params.init_state("ep_sort", sort if sort in SORTS else "id")
    params.init_state("ep_desc", bool(params.get_bool("desc")))
    size = params.get_int("size")
    params.init_state("ep_size", size if size in PAGE_SIZES else 50)


def _filters(run_names: dict[int, str], db_options: list[str]) -> EpisodeFilter:
    with st.expander("Filters", expanded=True):
        c1, c2, c3, c4 = st.columns(4)
        c1.multiselect(
            "Runs", list(run_names), key="ep_runs", format_func=lambda i: run_names.get(i, str(i))
        )
        c2.multiselect("Outcome", list(OUTCOMES), key="ep_outcomes")
        c3.multiselect(
            "Failure class",
            FAILURE_CLASSES,
            key="ep_classes",
            format_func=FAILURE_LABELS.__getitem__,
        )
        extra = [d for d in st.session_state["ep_dbs"] if d not in db_options]
        c4.multiselect("Database", db_options + extra, key="ep_dbs", accept_new_options=True)
        st.text_input("Search question, gold SQL and model output", key="ep_text")
        c1, c2, c3, c4, c5, c6 = st.columns(6)
        c1.number_input("Min reward", key="ep_rmin", value=None, step=0.1)
        c2.number_input("Max reward", key="ep_rmax", value=None, step=0.1)
        c3.number_input("Min steps", key="ep_smin", value=None, min_value=0, step=1)
        c4.number_input("Max steps", key="ep_smax", value=None, min_value=0, step=1)
        c5.selectbox("Has SQL error", list(_TRISTATE), key="ep_sqlerr")
        c6.selectbox("Has unparsed output", list(_TRISTATE), key="ep_unparsed")
    ss = st.session_state
    return EpisodeFilter(
        run_ids=tuple(ss["ep_runs"]),
        outcomes=tuple(ss["ep_outcomes"]),
        db_ids=tuple(ss["ep_dbs"]),
        text=ss["ep_text"].strip() or None,
        min_reward=ss["ep_rmin"],
        max_reward=ss["ep_rmax"],
        min_steps=None if ss["ep_smin"] is None else int(ss["ep_smin"]),
        max_steps=None if ss["ep_smax"] is None else int(ss["ep_smax"]),
        has_sql_error=_TRISTATE[ss["ep_sqlerr"]],
        has_unparsed=_TRISTATE[ss["ep_unparsed"]],
        failure_classes=tuple(ss["ep_classes"]),
    )


def _write_url(flt: EpisodeFilter) -> None:
    ss = st.session_state
    params.put(nav.P_RUN, list(flt.run_ids))
    params.put("outcome", list(flt.outcomes))
    params.put(P_CLASS, list(flt.failure_classes))
    params.put("db", list(flt.db_ids))
    params.put("q", flt.text)
    params.put("rmin", flt.min_reward)
    params.put("rmax", flt.max_reward)
    params.put("smin", flt.min_steps)
    params.put("smax", flt.max_steps)
    params.put("sqlerr", flt.has_sql_error)
    params.put("unparsed", flt.has_unparsed)
    params.put("sort", None if ss["ep_sort"] == "id" else ss["ep_sort"])
    params.put("desc", True if ss["ep_desc"] else None)
    params.put("size", None if ss["ep_size"] == 50 else ss["ep_size"])


def _push_cursor(cursor: str) -> None:
    st.query_params[nav.P_CURSOR] = [*params.get_all(nav.P_CURSOR), cursor]


def _pop_cursor() -> None:
    params.put(nav.P_CURSOR, params.get_all(nav.P_CURSOR)[:-1])


def _rows(items: list[EpisodeSummary]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "id": e.id,
                "run": e.run_name,
                "question id": e.question_id,
                "sample": e.sample_index,
                "database": e.db_id,
                "question": e.question,
                "outcome": e.outcome or "playing",
                "class": FAILURE_LABELS[e.failure_class] if e.failure_class else None,
                "reward": e.reward,
                "steps": e.steps,
                "seconds": e.duration_seconds,
                "SQL error": e.has_sql_error,
                "unparsed": e.has_unparsed,
                "answer": e.answer,
                "replay": f"replay?{nav.P_EPISODE}={e.id}",
            }
            for e in items
        ],
        columns=[
            "id",
            "run",
            "question id",
            "sample",
            "database",
            "question",
            "outcome",
            "class",
            "reward",
            "steps",
            "seconds",
            "SQL error",
            "unparsed",
            "answer",
            "replay",
        ],
    )


st.title("Episodes")
runs = data.list_runs()
if not runs:
    st.info("No runs yet - run `rollscope run --policy oracle --dataset demo` to record one.")
    st.stop()

_seed_widgets_from_url()
run_names = {r.id: f"{r.name} (#{r.id})" for r in runs}
unknown = [i for i in st.session_state["ep_runs"] if i not in run_names]
if unknown:
    st.warning(f"Unknown run id(s) in the link: {', '.join(map(str, unknown))}; ignored.")
    st.session_state["ep_runs"] = [i for i in st.session_state["ep_runs"] if i in run_names]
flt = _filters(run_names, data.db_ids(st.session_state["ep_runs"]))

c1, c2, c3 = st.columns([2, 1, 1])
c1.selectbox("Sort by", SORTS, key="ep_sort")
c2.toggle("Descending", key="ep_desc")
c3.selectbox("Page size", PAGE_SIZES, key="ep_size")

# A changed filter or order starts again from the first page.
signature = repr(
    (flt, st.session_state["ep_sort"], st.session_state["ep_desc"], st.session_state["ep_size"])
)
if st.session_state.get("ep_signature") not in (None, signature):
    params.put(nav.P_CURSOR, None)
st.session_state["ep_signature"] = signature
_write_url(flt)

stack = params.get_all(nav.P_CURSOR)
page = data.list_episodes(
    flt,
    sort=st.session_state["ep_sort"],
    descending=st.session_state["ep_desc"],
    limit=st.session_state["ep_size"],
    cursor=stack[-1] if stack else None,
)

start = len(stack) * st.session_state["ep_size"]
total = "?" if page.total is None else str(page.total)
if not page.items:
    st.info("No episodes match these filters." if stack == [] else "No more episodes.")
else:
    st.caption(
        f"Episodes {start + 1}-{start + len(page.items)} of {total}. Select a row to replay it."
    )
    event = st.dataframe(
        _rows(page.items),
        hide_index=True,
        width="stretch",
        on_select="rerun",
        selection_mode="single-row",
        key="ep_table",
        column_config={
            "reward": st.column_config.NumberColumn(format="%.3f"),
            "seconds": st.column_config.NumberColumn(format="%.2f"),
            "replay": st.column_config.LinkColumn("replay", display_text="open"),
        },
    )
    selected = event.selection.rows if event is not None else []
    if selected:
        st.switch_page(nav.REPLAY, query_params={nav.P_EPISODE: str(page.items[selected[0]].id)})

prev_col, next_col, _ = st.columns([1, 1, 6])
prev_col.button(
    "Previous", disabled=not stack, on_click=_pop_cursor, icon=":material/chevron_left:"
)
next_col.button(
    "Next",
    disabled=page.next_cursor is None,
    on_click=_push_cursor,
    args=(page.next_cursor or "",),
    icon=":material/chevron_right:",
)
