"""Token shading in a real Chromium, a hostile output included (GRPO groups and the question
map have their own browser tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, screenshot, serving
from tests.browser.ui import wait_idle
from tests.support.dashboard_stores import build_analysis_store
from tests.support.personas import HOSTILE_ALTERNATIVE, HOSTILE_OUTPUT

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def analysis(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_analysis_store, tmp_path_factory.mktemp("analysis-browser")) as served:
        yield served


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
