"""The dashboard's entry point: `streamlit run app/dashboard/main.py` (or `rollscope dashboard`).

Pages come from the route table in `components/nav.py`; add a page there.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard import data
from app.dashboard.components import nav, params
from app.dashboard.components.icon import PAGE_ICON
from app.dashboard.settings import Settings

# Navigation sits in the top bar, not a sidebar: a sidebar kept ~300 px of an 800 px window
# and clipped the page's controls (issue 12, item 10); the top bar folds into a menu instead.
st.set_page_config(page_title="rollscope", page_icon=PAGE_ICON, layout="wide")


def pages(settings: Settings) -> list[st.Page]:
    """The pages this dashboard serves, first the default; aliases are hidden pages."""
    out: list[st.Page] = []
    for i, route in enumerate(nav.ROUTES):
        if route.writes and settings.read_only:
            continue
        out.append(
            st.Page(
                route.path,
                title=route.title,
                icon=route.icon,
                url_path=route.url_path,
                default=i == 0,
            )
        )
        out.extend(
            st.Page(route.path, title=route.title, url_path=alias, visibility="hidden")
            for alias in route.aliases
        )
    return out


_settings = data.settings()
page = st.navigation(pages(_settings), position="top")
params.clear_notices()
page.run()
