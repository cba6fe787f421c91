"""The dashboard in a real Chromium: browse runs, replay an episode, compare, launch a batch."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, screenshot
from tests.browser.ui import click_until, select_box, wait_drawn
from tests.support.dashboard_stores import XSS_OUTPUT

pytestmark = pytest.mark.browser


def test_runs_page_lists_runs(dashboard: Dashboard, page: Any) -> None:
    page.goto(dashboard.url("/runs"))
    page.get_by_text("In progress").wait_for()
    page.get_by_text("ckpt-3000: running, 1/10 episodes").wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    wait_drawn(page)
    screenshot(page, "runs")


def test_episodes_page_filters_from_the_url_and_opens_a_replay(
    dashboard: Dashboard, page: Any
) -> None:
    page.goto(dashboard.url(f"/episodes?run={dashboard.store.run_a}"))
    page.get_by_text("Episodes 1-6 of 6").wait_for()
    # The filters and the grid draw after the caption; the screenshot waits for both.
    select_box(page, "Sort by").get_by_role("combobox").wait_for()
    page.locator("[data-testid='stDataFrame'] [role='gridcell']").first.wait_for(state="attached")
    wait_drawn(page)
    screenshot(page, "episodes")
    page.goto(dashboard.url(f"/replay?episode={dashboard.store.query_episode}"))
    page.get_by_text("Step 1 of 3: DESCRIBE").wait_for()


def test_replay_steps_and_shows_model_output_as_text(dashboard: Dashboard, page: Any) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(dashboard.url(f"/replay?episode={dashboard.store.xss_episode}"))
    page.get_by_text("Step 1 of 3: DESCRIBE").wait_for()
    next_step = page.get_by_role("button", name=re.compile(r"Next$"))
    click_until(page, next_step, page.get_by_text("Step 2 of 3: QUERY"))
    page.wait_for_url(re.compile(r"step=2"))
    # The tags are shown as characters, never parsed into elements.
    code = page.locator("[data-testid='stCode']", has_text="<script>alert").first
    code.wait_for()
    assert XSS_OUTPUT in code.inner_text()
    assert page.locator("[data-testid='stMain'] b", has_text="bold").count() == 0
    assert dialogs == []
    wait_drawn(page)
    screenshot(page, "replay")


def test_compare_page_shows_the_matrix_and_divergence(dashboard: Dashboard, page: Any) -> None:
    fx = dashboard.store
    page.goto(dashboard.url(f"/compare?run={fx.run_a}&run={fx.run_b}&question=q-oldest"))
    page.get_by_text("95% CI").wait_for()
    page.get_by_text("First divergence at step 2.").wait_for()
    wait_drawn(page)
    screenshot(page, "compare")


def test_launch_an_oracle_batch_and_follow_it_to_the_end(dashboard: Dashboard, page: Any) -> None:
    page.goto(dashboard.url("/launch"))
    page.get_by_label("Run name").fill("browser-oracle")
    page.get_by_label("Number of questions").fill("2")
    page.get_by_role("button", name=re.compile("Launch")).click()
    done = re.compile(r"Completed: accuracy 100\.0% over 2 episodes|The worker exited")
    page.get_by_text(done).wait_for(timeout=120_000)
    assert page.get_by_text("The worker exited").count() == 0, page.locator(
        "[data-testid='stCode']"
    ).all_inner_texts()
    page.wait_for_url(re.compile(r"run=\d+"))
    page.get_by_text(re.compile(r"browser-oracle \(#\d+\): completed, 2/2 episodes")).wait_for()
    wait_drawn(page)
    screenshot(page, "launch")
    page.get_by_role("link", name="Episodes of this run").click()
    page.get_by_text("Episodes 1-2 of 2").wait_for()
