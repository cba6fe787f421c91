"""Open a dashboard page in Streamlit's AppTest, and read what it shows."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

MAIN = Path(__file__).resolve().parents[3] / "app" / "dashboard" / "main.py"


def open_page(page: str | None, **query: str | list[str]) -> AppTest:
    """Run the app, switch to a page (path relative to main.py) with query params, run it."""
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    if page is not None:
        at.switch_page(page)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    """Every piece of text the page shows, joined, for 'is it on the page' checks."""
    parts = [
        e.value
        for kind in (
            "markdown",
            "caption",
            "code",
            "info",
            "warning",
            "error",
            "success",
            "subheader",
            "title",
        )
        for e in at.get(kind)
    ]
    parts += [str(m.value) for m in at.metric]
    return "\n".join(str(p) for p in parts)
