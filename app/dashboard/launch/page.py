"""Launch: start a small batch from a form; a worker process writes it to the store, and the
page follows it (the run in the link)."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.header import header
from app.dashboard.launch import fields, follow

notices = header("Launch")
params.expect(nav.P_RUN)
settings = data.settings()
if settings.read_only:
    st.info("This dashboard is read-only; launching runs is switched off.")
    st.stop()

fields.show(settings)
followed = params.get_id(nav.P_RUN, "a run id")
params.show_notices(notices)
if followed is not None:
    follow.show(followed)
