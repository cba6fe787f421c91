"""Pages that show a run as soon as it begins: a store filling while a page is open (the demo
being built beside its dashboard, a follower, a job started elsewhere) needs no reload."""

from __future__ import annotations

from typing import NoReturn

import streamlit as st

from app.dashboard import data

NO_RUNS = (
    "No runs yet. A run shows here as it begins: `rollscope run --policy oracle --dataset demo` "
    "records one, and `make run` builds the demo's."
)
NEW_RUN_SECONDS = 5.0
"""How often a page with no run playing looks for a run begun since."""


def _reload_on_new(newest: int | None) -> None:
    latest = data.store().list_runs(limit=1)
    if (latest[0].id if latest else None) != newest:
        data.clear()  # the cached list does not hold it yet
        st.rerun()


def watch_for_new_runs(newest: int | None) -> None:
    """Reload the page when a run begins after `newest` (the newest run it loaded; None: it
    loaded none). Nothing else refreshes a page with no run playing."""
    st.fragment(run_every=NEW_RUN_SECONDS)(_reload_on_new)(newest)


def no_runs_yet(text: str = NO_RUNS) -> NoReturn:
    """End a page that has no run to show: say so, and reload it once a run begins."""
    st.info(text)
    latest = data.store().list_runs(limit=1)
    watch_for_new_runs(latest[0].id if latest else None)
    st.stop()
