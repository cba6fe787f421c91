"""The top of every page: its title, the store it reads, and where link notices go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from app.dashboard import data
from app.dashboard.components.browser import page_tools
from app.store_url import shown_url


def header(
    title: str,
    *,
    copy_link: bool = False,
    keys: Mapping[str, str] | None = None,
    quiet: Sequence[str] = (),
) -> Any:
    """Title row (with a "Copy link" button, key bindings and quiet query parameters when asked,
    see `browser.page_tools`); returns the container below it that `params.show_notices`
    fills."""
    settings = data.settings()
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):
        st.title(title, width="content")
        if copy_link or keys or quiet:
            page_tools(copy_link=copy_link, keys=keys, quiet=quiet)
        st.caption(
            f"store `{shown_url(settings.store_url)}`"
            + (" · read-only" if settings.read_only else ""),
            width="stretch",
            text_alignment="right",
        )
    return st.container()
