"""GRPO groups in a real Chromium: a group side by side, and the tables' "open" buttons, which
navigate in place as Episodes' do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from storage.store import Store
from tests.app.dashboard.training.test_training_page import _play
from tests.browser.conftest import Dashboard, screenshot, serving, start_dashboard, stop
from tests.browser.ui import select_box, wait_drawn, wait_idle
from tests.support.dashboard_stores import build_analysis_store
from tests.support.records import spec

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def analysis(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_analysis_store, tmp_path_factory.mktemp("groups-browser")) as served:
        yield served


def _open_row(page: Any, row: int, nth: int = 0) -> None:
    """One click on a row's "open" button, the grid's pinned first column (rows of 35 px under
    a header of 35 px)."""
    # Idle first: a grid the running script still redraws is replaced under the scroll.
    wait_idle(page)
    grid = page.locator("[data-testid='stDataFrame']").nth(nth)
    grid.scroll_into_view_if_needed()
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    wait_idle(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 30, box["y"] + 35 + 35 * row + 17)


def test_a_group_side_by_side_links_to_replay(analysis: Dashboard, page: Any) -> None:
    fx = analysis.store
    run_id = fx.runs["ckpt-100"]  # type: ignore[attr-defined]
    page.goto(analysis.url(f"/groups?run={run_id}"))
    page.get_by_text("Questions by reward variance").wait_for()
    wait_idle(page)
    screenshot(page, "groups")
    page.goto(analysis.url(f"/groups?run={run_id}&question=q-france"))
    page.get_by_text("Steps side by side").wait_for()
    # Member #0 (sample 0, three steps): its column's link opens that episode. (Its link was
    # not the page's first while some columns were still drawing.) Found by its column: the
    # aligned grid above names the member too, in a header the grid keeps hidden.
    column = page.locator("[data-testid='stColumn']", has_text="#0 r 1.10 A +1.")
    link = column.get_by_role("link", name="Replay this step")
    link.wait_for()
    wait_drawn(page)
    screenshot(page, "group")
    href = link.get_attribute("href")
    assert href is not None and href.startswith("replay?episode=") and href.endswith("&step=1")
    link.click()
    page.wait_for_url(re.compile(re.escape(href) + "$"))
    page.get_by_text("Step 1 of 3").wait_for()


def test_back_to_all_groups_then_another_group_opens_that_one(
    analysis: Dashboard, page: Any
) -> None:
    # The way back was a link to this same page: the browser kept `question=q-france` in its
    # URL, and the next click in the table reopened q-france whatever row it picked. And a
    # group's link opened a new tab on a second click: "open" navigates in place, each time.
    fx = analysis.store
    run_id = fx.runs["ckpt-100"]  # type: ignore[attr-defined]
    page.goto(analysis.url(f"/groups?run={run_id}&question=q-france"))
    page.get_by_text("Steps side by side").wait_for()
    wait_idle(page)
    for row, question in ((5, "q-oldest"), (4, "q-count")):  # the lowest stds, last
        page.get_by_text("All groups of ckpt-100").click()
        page.wait_for_url(re.compile(rf"/groups\?run={run_id}$"))
        page.get_by_text("Questions by reward variance").wait_for()
        _open_row(page, row)
        page.wait_for_url(re.compile(rf"/groups\?run={run_id}&question={question}$"))
        page.get_by_role("heading", name=f"Question {question}").wait_for()
        assert len(page.context.pages) == 1


def test_a_group_opened_from_the_default_run_names_its_run(analysis: Dashboard, page: Any) -> None:
    # The page opened without a run shows the default run (the newest with groups). A group
    # opened from it kept the link's parameters, none, so its link named no run: copied, it
    # opened whichever run was the default then.
    page.goto(analysis.url("/groups"))
    page.get_by_text("Questions by reward variance").wait_for()
    shown = select_box(page, "Run").get_by_role("combobox").input_value()
    run_id = re.search(r"\(#(\d+)\)$", shown)
    assert run_id is not None, shown
    _open_row(page, 0)
    page.wait_for_url(re.compile(rf"/groups\?run={run_id[1]}&question=[^&]+$"))
    page.get_by_text("Steps side by side").wait_for()


def test_a_samples_open_button_replays_it_in_place(analysis: Dashboard, page: Any) -> None:
    fx = analysis.store
    run_id = fx.runs["ckpt-100"]  # type: ignore[attr-defined]
    page.goto(analysis.url(f"/groups?run={run_id}&question=q-france"))
    page.get_by_text("Steps side by side").wait_for()
    _open_row(page, 3)  # sample 3: the hostile output
    page.wait_for_url(re.compile(rf"/replay\?episode={fx.hostile_episode}$"))  # type: ignore[attr-defined]
    page.get_by_text("Step 1 of").wait_for()
    assert len(page.context.pages) == 1


@pytest.fixture(scope="module")
def training(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A training run of two steps, a group of two samples per question at each."""
    root = tmp_path_factory.mktemp("groups-training-browser")
    store = Store(str(root / "store.db"))
    run_id = store.create_run(spec("grpo-groups", kind="training"), episodes_planned=8)
    plays = []
    for step_no in range(2):
        for g, q in enumerate(("q1", "q2")):
            for k in range(2):
                sample = 2 * step_no + k
                right = q == "q1" and k == 0
                actions = ["DESCRIBE", "ANSWER" if right else "QUERY"]
                plays.append((q, sample, actions, right, (step_no, 2 * step_no + g)))
    sink = store.sink(run_id)
    for play in plays:
        _play(sink, *play)
    store.set_run_status(run_id, "completed")
    store.close()
    proc, base_url = start_dashboard(f"sqlite:///{root / 'store.db'}", root / "dash.log")
    yield base_url, run_id
    stop(proc)


def test_back_from_all_groups_returns_to_the_group_not_half_its_link(
    training: tuple[str, int], page: Any
) -> None:
    # Opening a group and going back to all groups wrote question and group one at a time:
    # browser Back landed on a link with the group but not its question.
    base_url, run_id = training
    page.goto(f"{base_url}/groups?run={run_id}")
    page.get_by_text("Groups by reward variance").wait_for()
    _open_row(page, 0)  # the q1 groups, mixed, first
    page.wait_for_url(re.compile(rf"run={run_id}&question=q1&group=\d$"))
    group_url = page.url
    page.get_by_text("Steps side by side").wait_for()
    wait_idle(page)
    page.get_by_text("All groups of grpo-groups").click()
    page.wait_for_url(re.compile(rf"/groups\?run={run_id}$"))
    page.get_by_text("Groups by reward variance").wait_for()
    wait_idle(page)
    page.go_back()
    page.wait_for_url(group_url)
    page.get_by_text("Steps side by side").wait_for()
    page.go_back()
    page.wait_for_url(re.compile(rf"/groups\?run={run_id}$"))
