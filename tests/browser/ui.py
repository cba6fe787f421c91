"""Small Playwright helpers for Streamlit pages: wait for a run to end, pick from a select box,
read a data frame's rows (its accessible table), press a button by widget key, click until
something shows."""

from __future__ import annotations

import re
from typing import Any

IDLE_TIMEOUT_MS = 120_000  # a first page load on a busy 2-core machine imports pandas, plotly
PICK_TIMEOUT_MS = 10_000  # an open list shows its options within a frame; 10 s is a busy machine


def wait_idle(page: Any) -> None:
    """Wait until Streamlit is not running the script: the app reports `notRunning` (it says
    `rerunRequested` from the moment a click asks for a rerun) and its status widget is gone."""
    page.wait_for_selector("[data-testid='stApp']")
    page.wait_for_function(
        "document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'"
        " && !document.querySelector('[data-testid=\"stStatusWidget\"]')",
        timeout=IDLE_TIMEOUT_MS,
    )


def wait_drawn(page: Any) -> None:
    """`wait_idle`, then wait until no element draws as a grey box: one whose code is still
    loading (a code block, a link, the data grid, the first time) holds its place with a
    skeleton, and the ones drawn first are not the first on the page."""
    wait_idle(page)
    page.wait_for_function(
        "!document.querySelector('[data-testid^=\"stSkeleton\"]')", timeout=IDLE_TIMEOUT_MS
    )


def select_box(page: Any, label: str) -> Any:
    """The select box whose label contains `label`."""
    return page.locator("[data-testid='stSelectbox']", has_text=label).first


def pick(page: Any, label: str, option: str, *, typed: str | None = None) -> None:
    """Open a select box, optionally type to filter, and click the option containing `option`."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # tests skip without it

    # Charts drawn after the script ends push the box down: a click aimed before they are
    # drawn lands on whatever took its place.
    wait_drawn(page)
    field = select_box(page, label).get_by_role("combobox")
    wanted = page.get_by_role("listbox").get_by_role("option", name=re.compile(re.escape(option)))
    # A rerun that starts before the status widget shows (it appears after a delay) redraws the
    # box and closes its list, before the option shows or between its showing and the click:
    # open it again, up to three times.
    for attempt in range(3):
        field.click()
        if typed is not None:
            field.fill(typed)
        try:
            wanted.first.click(timeout=PICK_TIMEOUT_MS)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_idle(page)


def shown_value(page: Any, label: str) -> str:
    """The text a select box shows as its value."""
    return str(select_box(page, label).get_by_role("combobox").input_value())


def wait_shown(page: Any, label: str, text: str) -> None:
    """Wait until a select box shows a value containing `text` (set by a rerun, not a pick)."""
    from playwright.sync_api import expect  # tests skip without it

    field = select_box(page, label).get_by_role("combobox")
    expect(field).to_have_value(re.compile(re.escape(text)), timeout=IDLE_TIMEOUT_MS)


def table_rows(page: Any, nth: int = 0) -> list[list[str]]:
    """Cell texts of the nth data frame on the page, row by row (header row left out)."""
    grid = page.locator("[data-testid='stDataFrame']").nth(nth)
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    rows = grid.locator("tbody tr")
    return [rows.nth(i).locator("[role='gridcell']").all_inner_texts() for i in range(rows.count())]


def keyed(page: Any, key: str) -> Any:
    """The element Streamlit rendered for the widget with this key."""
    return page.locator(f".st-key-{key}")


def click_until(page: Any, button: Any, shown: Any, *, attempts: int = 3) -> None:
    """Click `button` until `shown` is visible. On a busy machine a click has been lost: the page
    idle, still as it was. Click again as a user would, but only once the page is idle and
    `shown` still absent, so a click that is merely slow is never pressed twice."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # tests skip without it

    for attempt in range(attempts):
        button.click()
        try:
            shown.wait_for(timeout=PICK_TIMEOUT_MS)
            return
        except PlaywrightTimeout:
            wait_idle(page)
            if shown.is_visible():
                return
            if attempt == attempts - 1:
                raise
