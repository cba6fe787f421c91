"""The question map in a real Chromium: a heatmap cell opens that run's samples of the question,
and a flip opens the two runs side by side, both in place."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, screenshot, serving
from tests.browser.ui import wait_idle
from tests.support.dashboard_stores import build_analysis_store, build_comparison_store

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def analysis(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_analysis_store, tmp_path_factory.mktemp("map-browser")) as served:
        yield served


def _map(analysis: Dashboard, page: Any) -> tuple[list[int], Any]:
    fx = analysis.store
    ids = [fx.runs[n] for n in ("ckpt-100", "ckpt-200", "ckpt-300")]  # type: ignore[attr-defined]
    page.goto(analysis.url("/map?" + "&".join(f"run={i}" for i in ids)))
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for()
    page.get_by_text("Flips between consecutive runs").wait_for()
    wait_idle(page)
    _wait_for_cells(page, 6 * 3)  # 6 questions, 3 runs
    return ids, plot


def test_clicking_a_heatmap_cell_opens_that_questions_episodes(
    analysis: Dashboard, page: Any
) -> None:
    ids, plot = _map(analysis, page)
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
    # One history entry: Back is the map again.
    page.go_back()
    page.wait_for_url(re.compile(r"/map\?run="))
    page.get_by_text("Flips between consecutive runs").wait_for()


def test_a_flips_side_by_side_button_opens_compare_in_place(analysis: Dashboard, page: Any) -> None:
    ids, _ = _map(analysis, page)
    grid = page.locator("[data-testid='stDataFrame']").nth(1)
    grid.scroll_into_view_if_needed()
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    wait_idle(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 40, box["y"] + 35 + 17)  # the first flip: q-count, lost
    page.wait_for_url(re.compile(rf"/compare\?run={ids[0]}&run={ids[1]}&question=q-count$"))
    wait_idle(page)
    assert len(page.context.pages) == 1


@pytest.fixture(scope="module")
def different(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_comparison_store, tmp_path_factory.mktemp("map-different")) as served:
        yield served


def test_runs_on_different_questions_map_the_shared_ones_until_unticked(
    different: Dashboard, page: Any
) -> None:
    fx = different.store
    ids = (fx.train, fx.everything)  # type: ignore[attr-defined]
    page.goto(different.url(f"/map?run={ids[0]}&run={ids[1]}"))
    page.get_by_text("3 questions every chosen run played (3 of the 6 left out").wait_for()
    wait_idle(page)
    box = page.get_by_role("checkbox", name="Only questions every chosen run played")
    assert box.is_checked()
    _wait_for_cells(page, 3 * 2)
    page.get_by_text("Only questions every chosen run played").click()
    page.wait_for_url(re.compile(r"&shared=0$"))
    page.get_by_text("6 questions, easiest at the top").wait_for()
    wait_idle(page)
    assert not box.is_checked()
    _wait_for_cells(page, 6 * 2)


def _wait_for_cells(page: Any, count: int) -> None:
    """Wait until the map's overlay (a point per cell) holds `count` points: plotly draws
    after the script ends, so the chart may be there before its data."""
    page.wait_for_function(
        """n => {
            const gd = document.querySelector('.js-plotly-plot');
            return !!(gd && gd.data && gd.data[1] && gd.data[1].text.length === n);
        }""",
        arg=count,
        timeout=30_000,
    )
