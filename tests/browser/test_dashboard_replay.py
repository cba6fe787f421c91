"""Replay in Chromium: the step strip, the keys, and a step readable without scrolling."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, open_page
from tests.browser.ui import click_until, wait_idle

pytestmark = pytest.mark.browser


def _heading(page: Any, n: int, action: str) -> Any:
    return page.get_by_role("heading", name=f"Step {n} of 3: {action}")


def _at_step(page: Any, n: int, action: str) -> None:
    _heading(page, n, action).wait_for()
    if n > 1:  # step 1 is the default: the URL leaves it out
        page.wait_for_url(re.compile(rf"step={n}(&|$)"))
    else:
        page.wait_for_url(lambda url: "step=" not in url)
    wait_idle(page)


def test_step_strip_and_keys_move_through_the_episode(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, item 7: one chip per step (a failing step is one click away), and ← → j k.
    page.goto(dashboard.url(f"/replay?episode={dashboard.store.query_episode}"))
    page.get_by_role("heading", name="Step 1 of 3: DESCRIBE").wait_for()
    wait_idle(page)
    chips = page.get_by_role("radiogroup", name="Steps").get_by_role("radio")
    chips.nth(2).wait_for()  # count() does not wait for the strip to draw
    assert chips.count() == 3
    assert "QUERY" in chips.nth(1).inner_text() and "+0.10" in chips.nth(1).inner_text()
    assert "ANSWER" in chips.nth(2).inner_text()
    chips.nth(2).click()
    _at_step(page, 3, "ANSWER")
    # The keys work wherever the focus is: here on the chip just clicked.
    page.keyboard.press("ArrowLeft")
    _at_step(page, 2, "QUERY")
    page.keyboard.press("k")
    _at_step(page, 1, "DESCRIBE")
    page.keyboard.press("j")
    _at_step(page, 2, "QUERY")
    page.keyboard.press("ArrowRight")
    _at_step(page, 3, "ANSWER")
    page.keyboard.press("ArrowRight")  # past the last step: nothing happens
    wait_idle(page)
    assert page.get_by_role("heading", name="Step 3 of 3: ANSWER").is_visible()
    # The buttons the keys press are there for the mouse too.
    first = page.get_by_role("button", name=re.compile("First"))
    click_until(page, first, _heading(page, 1, "DESCRIBE"))
    _at_step(page, 1, "DESCRIBE")


def test_a_step_is_readable_at_900_px_without_scrolling(
    dashboard: Dashboard, chromium: Any
) -> None:
    # Issue 12, item 7: the output and the observation show above the fold; the chart folds.
    url = dashboard.url(f"/replay?episode={dashboard.store.query_episode}&step=2")
    with open_page(chromium, width=1400, height=900) as page:
        page.goto(url)
        page.get_by_role("heading", name="Step 2 of 3: QUERY").wait_for()
        wait_idle(page)
        # Visible ones only: a folded expander's code block (no size) also holds the text.
        observation = page.locator("[data-testid='stCode']:visible", has_text="Ada").first
        box = observation.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, box
        chart = page.locator(".js-plotly-plot").first
        assert not chart.is_visible()  # folded until asked for
        page.locator("[data-testid='stExpander']", has_text="Reward per step").click()
        chart.wait_for()


def test_play_walks_the_steps_and_stops_at_the_last(dashboard: Dashboard, page: Any) -> None:
    # Issue 31, item 1: Play turned into Pause and the page stayed on step 1.
    page.goto(dashboard.url(f"/replay?episode={dashboard.store.query_episode}"))
    page.get_by_role("heading", name="Step 1 of 3: DESCRIBE").wait_for()
    wait_idle(page)
    page.get_by_role("button", name=re.compile("Play")).click()
    page.get_by_role("heading", name="Step 2 of 3: QUERY").wait_for(timeout=30_000)
    page.get_by_role("heading", name="Step 3 of 3: ANSWER").wait_for(timeout=30_000)
    # At the last step playing stops: the button reads Play again and the link names the step.
    page.get_by_role("button", name=re.compile("Play")).wait_for(timeout=30_000)
    page.wait_for_url(re.compile(r"step=3(&|$)"))


def test_browser_back_leaves_replay_in_one_step(dashboard: Dashboard, page: Any) -> None:
    # Issue 31, item 11: Back walked through every step before it reached the list.
    fx = dashboard.store
    page.goto(dashboard.url(f"/episodes?run={fx.run_a}"))
    page.get_by_role("heading", name="Episodes").wait_for()
    wait_idle(page)
    page.goto(dashboard.url(f"/replay?episode={fx.query_episode}"))
    page.get_by_role("heading", name="Step 1 of 3: DESCRIBE").wait_for()
    wait_idle(page)
    for n, action in ((2, "QUERY"), (3, "ANSWER")):
        next_step = page.get_by_role("button", name=re.compile(r"Next$"))
        click_until(page, next_step, _heading(page, n, action))
        _at_step(page, n, action)
    page.go_back()
    page.wait_for_url(re.compile(r"/episodes\?"))
    page.get_by_role("heading", name="Episodes").wait_for()
