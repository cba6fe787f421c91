"""The dashboard's route table: `streamlit run app/dashboard/main.py` (or `rollscope dashboard`)."""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav

st.set_page_config(page_title="rollscope", page_icon=":material/query_stats:", layout="wide")

_settings = data.settings()
_pages: dict[str, list[st.Page]] = {
    "Browse": [
        st.Page(nav.RUNS, title="Runs", icon=":material/list:", url_path="runs", default=True),
        st.Page(nav.EPISODES, title="Episodes", icon=":material/table:", url_path="episodes"),
        st.Page(nav.REPLAY, title="Replay", icon=":material/replay:", url_path="replay"),
    ],
    "Analyse": [
        st.Page(nav.COMPARE, title="Compare", icon=":material/compare:", url_path="compare"),
        st.Page(nav.MAP, title="Question map", icon=":material/grid_on:", url_path="map"),
        st.Page(nav.GROUPS, title="GRPO groups", icon=":material/workspaces:", url_path="groups"),
        st.Page(
            nav.TRAINING, title="Training", icon=":material/model_training:", url_path="training"
        ),
    ],
}
if not _settings.read_only:
    _pages["Run"] = [
        st.Page(nav.LAUNCH, title="Launch", icon=":material/rocket_launch:", url_path="launch")
    ]

st.sidebar.caption(
    f"store: `{_settings.store_url}`" + (" (read-only)" if _settings.read_only else "")
)
st.navigation(_pages).run()
