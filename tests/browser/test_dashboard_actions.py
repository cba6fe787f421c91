"""What a user does on the pages, in Chromium: select runs, click through Compare's lists,
export episodes, and get Launch's reasons under the fields."""

from __future__ import annotations

import io
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow.parquet as pq
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import Dashboard, open_page
from tests.browser.ui import pick, table_rows, wait_idle, wait_shown

pytestmark = pytest.mark.browser

_HEADER_PX = 35
_ROW_PX = 35


def _tick_row(page: Any, grid: Any, row: int) -> None:
    """Click a row's selection box (the grid's first, unlabelled column)."""
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    grid.scroll_into_view_if_needed()
    wait_idle(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 16, box["y"] + _HEADER_PX + _ROW_PX * row + _ROW_PX / 2)


def _tick_runs(page: Any, run_names: list[str]) -> None:
    """Tick the Runs table's rows of `run_names` in order, each once the page shows the last."""
    page.get_by_text("Select runs in the table").wait_for()
    wait_idle(page)
    grid = page.locator("[data-testid='stDataFrame']").first
    names = [row[1] for row in table_rows(page)]
    for ticked, name in enumerate(run_names, start=1):
        row = next(i for i, n in enumerate(names) if name in n)
        for attempt in range(3):
            _tick_row(page, grid, row)
            try:
                # Long enough for a loaded machine's rerun: a click the page took and is still
                # drawing would be taken back by the next.
                page.wait_for_url(re.compile("run=\\d+.*" * ticked), timeout=30_000)
                break
            except PlaywrightTimeoutError:
                # The live table (a run is in progress) redrew under the click, which never
                # reached it: click again, as a user would. A tick the page took but the URL
                # never shows still fails: the next click takes it back.
                if attempt == 2:
                    raise
        page.get_by_text(f"Charts of the {ticked} selected run{'s' * (ticked > 1)}.").wait_for()
        wait_idle(page)


def test_selected_runs_drive_the_charts_and_the_links(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, item 8: the quick links and the charts follow the user's selection.
    fx = dashboard.store
    page.goto(dashboard.url("/runs"))
    _tick_runs(page, ["ckpt-2000", "ckpt-1000"])
    link = page.get_by_role("link", name="Compare these 2 runs")
    assert sorted(parse_qs(urlparse(link.get_attribute("href") or "").query)["run"]) == sorted(
        [str(fx.run_a), str(fx.run_b)]
    )
    charts = page.locator("[data-testid='stPlotlyChart']", has_text="Accuracy")
    accuracy = charts.filter(has_text="ckpt-1000").filter(has_text="ckpt-2000").first
    accuracy.wait_for()
    assert "ckpt-3000" not in accuracy.inner_text()


def test_compare_only_lists_open_a_question_side_by_side(dashboard: Dashboard, page: Any) -> None:
    fx = dashboard.store
    page.goto(dashboard.url(f"/compare?run={fx.run_a}&run={fx.run_b}"))
    page.get_by_text("95% CI").wait_for()
    wait_idle(page)
    only_b = page.locator("[data-testid='stExpander']", has_text="only ckpt-2000: 2")
    grid = only_b.locator("[data-testid='stDataFrame']")
    second = grid.locator("tbody tr").nth(1)  # the first is the picker's default already
    second.wait_for(state="attached")
    question_id = second.locator("[role='gridcell']").first.inner_text()
    _tick_row(page, grid, 1)
    page.wait_for_url(re.compile(rf"question={question_id}(&|$)"))
    # The URL is written in the click's callback; the box shows the pick once the rerun draws it.
    wait_shown(page, "Question (", question_id)


def test_export_downloads_the_filtered_episodes(dashboard: Dashboard, page: Any) -> None:
    fx = dashboard.store
    page.goto(dashboard.url(f"/episodes?run={fx.run_a}&outcome=correct"))
    page.get_by_text("Episodes 1-3 of 3").wait_for()
    wait_idle(page)
    page.get_by_role("button", name=re.compile("Export")).click()
    with page.expect_download() as jsonl:
        page.get_by_role("button", name=re.compile("Download JSONL")).click()
    lines = jsonl.value.path().read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 3 and {r["outcome"] for r in rows} == {"correct"}
    assert all(r["steps"] for r in rows)
    assert jsonl.value.suggested_filename == "ckpt-1000-episodes.jsonl"
    with page.expect_download() as parquet:
        page.get_by_role("button", name=re.compile("Download Parquet")).click()
    table = pq.read_table(io.BytesIO(parquet.value.path().read_bytes()))
    assert table.num_rows == 3


def test_launch_says_why_under_the_field(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, item 9: an out-of-range number made Launch do nothing, the reason in a tooltip.
    page.goto(dashboard.url("/launch"))
    page.get_by_role("textbox", name="Run name").wait_for()
    wait_idle(page)
    pick(page, "Policy / checkpoint", "other checkpoint directory")
    page.get_by_role("textbox", name=re.compile("Checkpoint directory")).wait_for()
    wait_idle(page)
    page.get_by_role("spinbutton", name=re.compile("Step budget")).fill("99")
    page.get_by_role("textbox", name=re.compile("Checkpoint directory")).fill("hf:/models/ckpt-1")
    page.get_by_role("textbox", name="Run name").fill("too-long-a-budget")
    page.get_by_role("button", name=re.compile("Launch")).click()
    page.get_by_text("step budget must be between 1 and 50, got 99").wait_for()
    page.get_by_text("no checkpoint roots configured").wait_for()
    wait_idle(page)
    # Both boxes in one frame: measured one call apart, a scroll or a late redraw between the
    # calls moved one and not the other.
    below = page.evaluate(
        "([field, reason]) => reason.getBoundingClientRect().top"
        " - field.getBoundingClientRect().top",
        [
            page.get_by_role("spinbutton", name=re.compile("Step budget")).element_handle(),
            page.get_by_text("step budget must be between").element_handle(),
        ],
    )
    assert 0 < below < 120  # right under the field
    page.get_by_text("Not launched: 2 fields to fix").wait_for()


def _compare_order(page: Any) -> list[str]:
    link = page.get_by_role("link", name="Compare these 2 runs")
    link.wait_for()
    return parse_qs(urlparse(link.get_attribute("href") or "").query)["run"]


def test_the_run_ticked_first_is_the_baseline(dashboard: Dashboard, chromium: Any) -> None:
    # Issue 31, item 5: the Compare link took table order, newest first, so the newer run was A.
    fx = dashboard.store
    name = {fx.run_a: "ckpt-1000", fx.run_b: "ckpt-2000"}
    for first, second in ((fx.run_a, fx.run_b), (fx.run_b, fx.run_a)):
        with open_page(chromium) as page:
            page.goto(dashboard.url("/runs"))
            _tick_runs(page, [name[first], name[second]])
            assert _compare_order(page) == [str(first), str(second)]


_RED = """(root) => [root, ...root.querySelectorAll("*")].flatMap((el) => {
  const css = getComputedStyle(el);
  return [css.color, css.backgroundColor, css.borderTopColor, css.fill];
}).filter((c) => {
  const m = /rgba?\\((\\d+), (\\d+), (\\d+)/.exec(c || "");
  return m && +m[1] > 150 && +m[2] < 100 && +m[3] < 100;
})"""


def test_red_is_for_errors_only(dashboard: Dashboard, page: Any) -> None:
    # Issue 31, polish: Streamlit's red accent filled progress bars, the selected step and
    # the runs picked in a filter.
    fx = dashboard.store
    page.goto(dashboard.url("/runs"))
    bar = page.locator("[data-testid='stProgress']").first  # the running ckpt-3000
    bar.wait_for()
    wait_idle(page)
    assert bar.evaluate(_RED) == []
    page.goto(dashboard.url(f"/replay?episode={fx.query_episode}&step=2"))
    page.get_by_role("heading", name="Step 2 of 3: QUERY").wait_for()
    wait_idle(page)
    assert page.get_by_role("radiogroup", name="Steps").evaluate(_RED) == []
    page.goto(dashboard.url(f"/episodes?run={fx.run_a}"))
    picked = page.locator("[data-testid='stMultiSelect']", has_text="ckpt-1000").first
    picked.wait_for()
    wait_idle(page)
    assert picked.evaluate(_RED) == []


def test_a_link_to_no_page_says_so(dashboard: Dashboard, page: Any) -> None:
    # Issue 31, polish: /nonexistent silently showed Runs.
    # "/xreplay" ends in a page's path: it was told as "no page /x".
    for path in ("/nonexistent", "/xreplay"):
        page.goto(dashboard.url(path))
        page.get_by_text("This dashboard has no page at that address; this is Runs.").wait_for()
    page.goto(dashboard.url("/runs"))
    page.get_by_role("heading", name="Runs").wait_for()
    wait_idle(page)
    assert page.get_by_text("no page at that address").count() == 0
