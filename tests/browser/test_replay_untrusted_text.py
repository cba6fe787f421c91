"""Replay in Chromium on an output with terminal control characters and token confidence: the
controls read as their pictures, and the long shaded output scrolls in a box as tall as the
raw output's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.dashboard.components.render import BOX_PX
from tests.browser.conftest import Dashboard, screenshot, serving
from tests.browser.ui import wait_drawn
from tests.support.control_text import build_control_store

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def control(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_control_store, tmp_path_factory.mktemp("control-browser")) as served:
        yield served


def test_a_long_shaded_output_scrolls_and_shows_control_pictures(
    control: Dashboard, page: Any
) -> None:
    page.goto(control.url(f"/replay?episode={control.store.episode}"))
    page.get_by_role("heading", name="Step 1 of 2: QUERY").wait_for()
    wait_drawn(page)
    tokens = page.locator(".rs-tokens").first
    size = tokens.evaluate(
        "el => ({height: el.offsetHeight, client: el.clientHeight, scroll: el.scrollHeight})"
    )
    # It grew to the whole output's height (about 3,000 px) before.
    assert size["height"] <= BOX_PX and size["scroll"] > size["client"], size
    raw = page.locator("[data-testid='stCode']:visible").first.bounding_box()
    assert raw is not None and abs(raw["height"] - size["height"]) <= 2, (raw, size)
    assert "-- ␛[31mred␛[0m␇" in tokens.inner_text()
    code = page.locator("[data-testid='stCode']:visible", has_text="QUERY: SELECT").first
    assert "␡</think>" in code.inner_text()
    assert 'near "␛": syntax error' in page.locator("[data-testid='stAlert']").first.inner_text()
    screenshot(page, "replay-control-characters")
