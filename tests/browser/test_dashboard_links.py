"""The URL as the page state, in Chromium: bound widgets keep each pick, bad links get notices,
Replay keeps its place in the Episodes list, and pages fit a narrow window."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser.conftest import Dashboard, open_page
from tests.browser.ui import pick, shown_value, table_rows, wait_idle

pytestmark = pytest.mark.browser


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlparse(url).query)


def test_compare_question_picker_keeps_every_pick(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, bug 1: the second pick reverted to the first and the URL kept the first.
    fx = dashboard.store
    page.goto(dashboard.url(f"/compare?run={fx.run_a}&run={fx.run_b}"))
    wait_idle(page)
    picks = [("q-join", None), ("q-count", None), ("q-empty", "empt"), ("q-france", "fran")]
    for question_id, typed in picks:
        pick(page, "Question (", question_id, typed=typed)
        page.wait_for_url(re.compile(rf"question={question_id}(&|$)"))
        wait_idle(page)
        assert question_id in shown_value(page, "Question ("), (question_id, page.url)
    page.get_by_text("What are the names of the singers from France?").first.wait_for()
    # The pick survives a reload: the URL holds it.
    page.reload()
    wait_idle(page)
    assert "q-france" in shown_value(page, "Question (")


def test_episodes_sort_keeps_two_consecutive_picks(dashboard: Dashboard, page: Any) -> None:
    page.goto(dashboard.url(f"/episodes?run={dashboard.store.run_a}"))
    wait_idle(page)
    for sort in ("reward", "steps"):
        pick(page, "Sort by", sort)
        page.wait_for_url(re.compile(rf"sort={sort}"))
        wait_idle(page)
        assert shown_value(page, "Sort by") == sort


def test_runs_alias_and_bad_links_give_notices_not_tracebacks(
    dashboard: Dashboard, page: Any
) -> None:
    # Issue 12, bug 4. An alias forwards to its page, and the menu lights that page's entry.
    lit = page.locator("[data-testid='stTopNavLink'][aria-current='page']")
    page.goto(dashboard.url("/runs"))
    page.get_by_role("heading", name="Runs").wait_for()
    page.wait_for_url(re.compile(r":\d+/$"))
    wait_idle(page)
    assert page.get_by_text("Page not found").count() == 0
    assert lit.inner_text().strip().endswith("Runs")
    # The Question map at its title's path, not read as "map" under a base path "question_".
    runs = f"run={dashboard.store.run_a}&run={dashboard.store.run_b}"
    for path in ("/question_map", "/question-map"):
        page.goto(dashboard.url(f"{path}?{runs}"))
        page.get_by_role("heading", name="Question map").wait_for()
        page.wait_for_url(re.compile(rf"/map\?{runs}$"))
        wait_idle(page)
        assert lit.inner_text().strip().endswith("Question map")
        assert page.get_by_text("no page at that address").count() == 0
    # An alias leaves no history entry: Back from it does not bounce forward again.
    page.go_back()
    page.wait_for_url(re.compile(rf"/map\?{runs}$"))
    page.go_back()
    page.wait_for_url(re.compile(r":\d+/$"))  # /runs, moved to the root
    page.get_by_role("heading", name="Runs").wait_for()
    page.goto(dashboard.url(f"/episodes?run={dashboard.store.run_a}&cursor=xyz&size=7"))
    page.get_by_text("Episodes 1-6 of 6").wait_for()
    notice = page.locator("[data-testid='stAlert']").first
    assert "page cursor" in notice.inner_text() and "size='7'" in notice.inner_text()
    page.goto(dashboard.url("/replay?episode=abc"))
    page.get_by_text("episode='abc' in the link is not an episode id").wait_for()
    wait_idle(page)
    assert page.locator("[data-testid='stException']").count() == 0


def _open_first_row(page: Any) -> None:
    """One click on the first row's "open" button (the pinned first column of the grid)."""
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 40, box["y"] + 35 + 17)  # header 35 px, rows 35 px


def test_replay_keeps_the_episode_list_for_back_and_neighbours(
    dashboard: Dashboard, page: Any
) -> None:
    # Issue 12, item 6, and "one click on a row's open link opens it".
    fx = dashboard.store
    listing = f"/episodes?run={fx.run_b}&outcome=correct&sort=reward&desc=1&size=10"
    # wide enough that the grid renders its last column (the episode id) too
    page.set_viewport_size({"width": 2200, "height": 1000})
    page.goto(dashboard.url(listing))
    page.get_by_text("Episodes 1-4 of 4").wait_for()
    wait_idle(page)
    listed = [int(row[-1]) for row in table_rows(page)]
    _open_first_row(page)
    page.wait_for_url(re.compile(r"/replay\?episode=\d+"))
    wait_idle(page)
    assert _query(page.url)["episode"] == [str(listed[0])]
    back = page.get_by_role("link", name="Back to the list")
    href = back.get_attribute("href") or ""
    assert _query(href) == {
        "run": [str(fx.run_b)],
        "outcome": ["correct"],
        "sort": ["reward"],
        "desc": ["1"],
        "size": ["10"],
    }
    page.get_by_role("button", name="Next episode").click()
    page.wait_for_url(re.compile(rf"episode={listed[1]}&"))
    wait_idle(page)
    page.get_by_role("button", name="Previous episode").wait_for()
    # Browser Back walks back to the list, its filters and order intact.
    page.go_back()
    page.wait_for_url(re.compile(rf"episode={listed[0]}&"))
    page.go_back()
    page.wait_for_url(re.compile(r"/episodes\?"))
    page.get_by_text("Episodes 1-4 of 4").wait_for()
    wait_idle(page)
    assert shown_value(page, "Sort by") == "reward"
    assert [int(row[-1]) for row in table_rows(page)] == listed


def test_copy_link_puts_the_page_url_on_the_clipboard(dashboard: Dashboard, chromium: Any) -> None:
    url = dashboard.url(f"/replay?episode={dashboard.store.query_episode}&step=2")
    with open_page(chromium, permissions=["clipboard-read", "clipboard-write"]) as page:
        page.goto(url)
        page.get_by_text("Step 2 of 3: QUERY").wait_for()
        wait_idle(page)
        page.frame_locator("iframe").first.get_by_role("button", name="Copy link").click()
        page.frame_locator("iframe").first.get_by_text("Link copied").wait_for()
        assert page.evaluate("navigator.clipboard.readText()") == page.url


def test_narrow_window_has_no_sidebar_and_metric_rows_wrap(
    dashboard: Dashboard, chromium: Any
) -> None:
    # Issue 12, item 10: at 800 px nothing takes 300 px beside the page or clips it.
    fx = dashboard.store
    with open_page(chromium, width=800, height=900) as page:
        page.goto(dashboard.url(f"/compare?run={fx.run_a}&run={fx.run_b}&question=q-oldest"))
        page.get_by_text("95% CI").wait_for()
        wait_idle(page)
        assert page.locator("[data-testid='stSidebar']").count() == 0
        assert page.get_by_role("link", name="Episodes").first.is_visible()
        metrics = page.locator("[data-testid='stMetric']")
        metrics.nth(7).wait_for()  # two runs, four metrics each
        for i in range(metrics.count()):
            box = metrics.nth(i).bounding_box()
            assert box is not None and box["x"] + box["width"] <= 800, (i, box)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 800


def test_wide_layout_and_an_icon_that_needs_no_internet(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, item 5 (the page's full width) and the offline page icon.
    outside: list[str] = []
    page.on(
        "request",
        lambda r: (
            outside.append(r.url)
            if not r.url.startswith((dashboard.base_url, "data:", "blob:", "about:"))
            else None
        ),
    )
    page.goto(dashboard.url("/"))
    page.get_by_role("heading", name="Runs").wait_for()
    wait_idle(page)
    main = page.locator("[data-testid='stMainBlockContainer']").bounding_box()
    assert main is not None and main["width"] >= 1200
    icons = page.eval_on_selector_all("link[rel*='icon']", "ls => ls.map(l => l.href)")
    assert icons and all(href.startswith("data:image/svg+xml") for href in icons), icons
    assert outside == []
