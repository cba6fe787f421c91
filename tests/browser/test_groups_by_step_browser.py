"""GRPO groups in a real Chromium on an environment server's run (a training step, no group
number): a row's "open" button opens the group it lists, at its step."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from storage.store import Store
from tests.browser.conftest import start_dashboard, stop
from tests.browser.test_groups_browser import _open_row
from tests.storage.test_store_groups_by_step import served_run

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """q1 played twice at each of three training steps; step 2's group alone has signal."""
    root = tmp_path_factory.mktemp("groups-served-browser")
    store = Store(str(root / "store.db"))
    run_id = served_run(store)
    store.close()
    proc, base_url = start_dashboard(f"sqlite:///{root / 'store.db'}", root / "dash.log")
    yield base_url, run_id
    stop(proc)


def test_open_on_a_row_opens_that_steps_group(served: tuple[str, int], page: Any) -> None:
    # Before: the link named the question alone, and the page pooled its six samples.
    base_url, run_id = served
    page.goto(f"{base_url}/groups?run={run_id}")
    page.get_by_text("Groups by reward variance").wait_for()
    _open_row(page, 0)  # the highest std: step 2's
    page.wait_for_url(re.compile(rf"/groups\?run={run_id}&question=q1&at=2$"))
    page.get_by_role("heading", name="Question q1, training step 2").wait_for()
    samples = page.locator("[data-testid='stMetric']", has_text="samples")
    assert samples.first.inner_text().split() == ["samples", "2"]
