"""The analysis views in a real Chromium: token shading (hostile output included), a GRPO
group side by side, and the question map's heatmap opening a cell's episodes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.analysis_store import HOSTILE_ALTERNATIVE, HOSTILE_OUTPUT, build_analysis_store
from tests.browser.conftest import Dashboard, screenshot, start_dashboard, stop
from tests.browser.ui import wait_drawn, wait_idle

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def analysis(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    root = tmp_path_factory.mktemp("analysis-browser")
    store = build_analysis_store(root)
    log = root / "dashboard.log"
    proc, base_url = start_dashboard(store.url, log)
    yield Dashboard(base_url, store, log)  # type: ignore[arg-type]
    stop(proc)


def test_tokens_are_shaded_and_hostile_output_stays_text(analysis: Dashboard, page: Any) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    fx = analysis.store
    page.goto(analysis.url(f"/replay?episode={fx.hostile_episode}&step=1"))  # type: ignore[attr-defined]
    tokens = page.locator(".rs-tokens .rs-tok")
    tokens.first.wait_for()
    wait_idle(page)
    main = page.locator("[data-testid='stMain']")
    # The output is the block's text, character for character; nothing in it became markup.
    assert page.locator(".rs-tokens").first.inner_text() == HOSTILE_OUTPUT
    assert main.locator(".rs-tokens script, .rs-tokens img, .rs-tokens b").count() == 0
    assert page.locator("img[src='x']").count() == 0
    assert tokens.count() == 5
    shades = tokens.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert len(set(shades)) > 1  # tokens differ in probability, and so in shade
    # Hover shows the numbers and the alternatives (drawn by CSS from data-tip).
    first = tokens.first
    first.hover()
    tip = first.evaluate("e => getComputedStyle(e, '::after').content")
    assert "log-prob" in tip and "entropy" in tip and HOSTILE_ALTERNATIVE in tip
    # Clicking (focus) keeps it shown when the mouse moves away.
    tokens.nth(2).click()
    page.mouse.move(5, 5)
    tip = tokens.nth(2).evaluate("e => getComputedStyle(e, '::after').content")
    assert "token 3" in tip
    assert dialogs == []
    screenshot(page, "replay-tokens")


def test_a_group_side_by_side_links_to_replay(analysis: Dashboard, page: Any) -> None:
    fx = analysis.store
    run_id = fx.runs["ckpt-100"]  # type: ignore[attr-defined]
    page.goto(analysis.url(f"/groups?run={run_id}"))
    page.get_by_text("Questions by reward variance").wait_for()
    wait_idle(page)
    screenshot(page, "groups")
    page.goto(analysis.url(f"/groups?run={run_id}&question=q-france"))
    page.get_by_text("Steps side by side").wait_for()
    page.get_by_text("#0 r 1.10 A +1.").first.wait_for()
    wait_drawn(page)
    screenshot(page, "group")
    # Member #0 (sample 0, three steps): its column's link opens that episode. (Its link was
    # not the page's first while some columns were still drawing.)
    column = page.locator("[data-testid='stColumn']", has_text="#0 r 1.10 A +1.")
    link = column.get_by_role("link", name="Replay this step")
    href = link.get_attribute("href")
    assert href is not None and href.startswith("replay?episode=") and href.endswith("&step=1")
    link.click()
    page.wait_for_url(re.compile(re.escape(href) + "$"))
    page.get_by_text("Step 1 of 3").wait_for()


def test_back_to_all_groups_then_another_group_opens_that_one(
    analysis: Dashboard, page: Any
) -> None:
    # The way back was a link to this same page: the browser kept `question=q-france` in its
    # URL, and the next click in the table reopened q-france whatever row it picked.
    fx = analysis.store
    run_id = fx.runs["ckpt-100"]  # type: ignore[attr-defined]
    page.goto(analysis.url(f"/groups?run={run_id}&question=q-france"))
    page.get_by_text("Steps side by side").wait_for()
    wait_idle(page)
    page.get_by_text("All groups of ckpt-100").click()
    page.wait_for_url(re.compile(rf"/groups\?run={run_id}$"))
    page.get_by_text("Questions by reward variance").wait_for()
    wait_idle(page)
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.scroll_into_view_if_needed()
    wait_idle(page)
    box = grid.bounding_box()
    # The last of the 6 rows (35 px each, under a 35 px header): q-oldest, lowest std.
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 35 * 5 + 17)
    page.wait_for_url(re.compile(r"question=q-oldest"))
    page.get_by_role("heading", name="Question q-oldest").wait_for()


def test_clicking_a_heatmap_cell_opens_that_questions_episodes(
    analysis: Dashboard, page: Any
) -> None:
    fx = analysis.store
    ids = [fx.runs[n] for n in ("ckpt-100", "ckpt-200", "ckpt-300")]  # type: ignore[attr-defined]
    page.goto(analysis.url("/map?" + "&".join(f"run={i}" for i in ids)))
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for()
    page.get_by_text("Flips between consecutive runs").wait_for()
    wait_idle(page)
    screenshot(page, "map")
    # Rows are easiest first: q-avg, q-count, q-empty, q-france, q-join, q-oldest (by mean
    # success, ties by id); click the cell of ckpt-200 (column 1) on q-oldest (row 5).
    point = plot.evaluate(
        """gd => {
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.d2p(1), box.top + ya._offset + ya.d2p(5)];
        }"""
    )
    texts = plot.evaluate("gd => gd.data[1].text")
    assert texts[5 * 3 + 1].startswith("q-oldest<br>ckpt-200: 75%")
    page.mouse.move(point[0], point[1])
    page.locator(".hoverlayer").get_by_text("q-oldest").wait_for()
    page.mouse.click(point[0], point[1])
    page.wait_for_url(re.compile(rf"/groups\?run={ids[1]}&question=q-oldest"))
    page.get_by_text("Question q-oldest").wait_for()
