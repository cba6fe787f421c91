"""The dashboard's entry point: `streamlit run app/dashboard/main.py` (or `rollscope dashboard`).

Pages come from the route table in `components/nav.py`; add a page there.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

import streamlit as st

from app.dashboard import data
from app.dashboard.components import browser, nav, params
from app.dashboard.components.icon import PAGE_ICON
from app.dashboard.settings import Settings

# Navigation sits in the top bar, not a sidebar: a sidebar takes a good part of a narrow window
# and clips the page's controls; the top bar folds into a menu instead.
st.set_page_config(page_title="rollscope", page_icon=PAGE_ICON, layout="wide")


def pages(settings: Settings) -> list[st.Page]:
    """The pages this dashboard serves, first the default; aliases are hidden pages that
    move to their page."""
    out: list[st.Page] = []
    for i, route in enumerate(nav.ROUTES):
        default = i == 0
        # A page that writes is left out of a read-only dashboard's menu, but a link to it
        # still opens it, to say it is off (it checks the setting itself).
        hidden = route.writes and settings.read_only
        out.append(
            st.Page(
                route.path,
                title=route.title,
                icon=route.icon,
                url_path=route.url_path,
                default=default,
                visibility="hidden" if hidden else "visible",
            )
        )
        # The default page is served at the root.
        target = "" if default else route.url_path
        out.extend(
            st.Page(_mover(target), title=route.title, url_path=alias, visibility="hidden")
            for alias in route.aliases
        )
    return out


def _mover(url_path: str) -> Callable[[], None]:
    """An alias's page: loads the link at its page's path, so that the menu lights that
    page's entry (a hidden page of its own lit none). Not `st.switch_page`: it pushes a history
    entry, and Back to the alias would move forward again."""
    return lambda: browser.move_to(url_path)


def missing_page(url: str | None, known: set[str]) -> str | None:
    """The path of a URL that names no page of this dashboard (Streamlit then runs the first
    page), or None; `url` as `st.context.url` gives it, `known` the pages' URL paths."""
    if not url:
        return None
    path = urlparse(url).path.strip("/")
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :].strip("/")
    # A path that ends in a page's own ("/question_map" ends in "map") Streamlit reads as that
    # page under a base path, and reports as "/question_/question_map" once on the page.
    return path if path and path.rsplit("/", 1)[-1] not in known else None


_settings = data.settings()
_pages = pages(_settings)
page = st.navigation(_pages, position="top")
params.clear_notices()
_known = {p.url_path for p in _pages} | {nav.ROUTES[0].url_path}  # the default's own path
if missing_page(st.context.url, _known) is not None:
    # Not named: Streamlit reads "/xreplay" as page "replay" under a base path "/x", and
    # reports only "/x".
    params.notice(f"This dashboard has no page at that address; this is {page.title}.")
page.run()
