"""The Training page in a real Chromium: following a training run live as episodes land, and
opening a question that flipped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rollout_core.settings import TrainingSettings
from storage.store import Store
from tests.app.dashboard.training.test_training_page import _play
from tests.browser.conftest import screenshot, start_dashboard, stop
from tests.browser.ui import shown_value, wait_idle, wait_shown
from tests.support.records import spec

pytestmark = pytest.mark.browser


@dataclass
class LiveRun:
    """A dashboard serving a store whose training run this process is still writing."""

    base_url: str
    store: Store
    run_id: int

    def play_step(self, step_no: int) -> None:
        """One training step: two questions, a group of two episodes each."""
        plays = []
        for g, q in enumerate(("q1", "q2")):
            for k in range(2):
                sample = 2 * step_no + k
                right = q == "q1" and k <= step_no - 1
                actions = ["DESCRIBE", "ANSWER" if right else "QUERY"]
                plays.append((q, sample, actions, right, (step_no, 2 * step_no + g)))
        sink = self.store.sink(self.run_id)
        for play in plays:
            _play(sink, *play)


@pytest.fixture(scope="module")
def live(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    root = tmp_path_factory.mktemp("training-browser")
    store = Store(str(root / "store.db"))
    settings = TrainingSettings(model="tiny", learning_rate=0.05, num_generations=2, max_steps=3)
    # Created by this process, which is alive: the run reads `running` for the dashboard.
    run_id = store.create_run(
        spec("grpo-live", kind="training", training=settings), episodes_planned=12
    )
    run = LiveRun("", store, run_id)
    run.play_step(0)
    run.play_step(1)
    proc, run.base_url = start_dashboard(f"sqlite:///{root / 'store.db'}", root / "dash.log")
    yield run
    stop(proc)
    store.close()


def _metric(page: Any, label: str) -> Any:
    box = page.locator("[data-testid='stMetric']", has_text=label)
    return box.locator("[data-testid='stMetricValue']")


def test_the_training_page_follows_a_running_run(live: LiveRun, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{live.base_url}/training?run={live.run_id}")
    page.get_by_text("Live: refreshes every").wait_for()
    expect(_metric(page, "training steps")).to_have_text("2")
    live.play_step(2)
    # The curves' fragment reruns every few seconds: the third step appears without a reload.
    expect(_metric(page, "training steps")).to_have_text("3", timeout=30_000)
    expect(_metric(page, "episodes")).to_have_text("12")
    # The question's side-by-side view is read once per page load (it is not a live part).
    page.reload()
    page.get_by_text("Training step 2", exact=False).first.wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    screenshot(page, "training")
    page.set_viewport_size({"width": 800, "height": 1000})
    page.get_by_text("Training step 2", exact=False).first.wait_for()
    screenshot(page, "training-narrow")


@pytest.fixture(scope="module")
def flipped(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A finished run: q-often drawn at every step and never right (the page's first question),
    q-learnt drawn at steps 0 and 2, wrong then right."""
    root = tmp_path_factory.mktemp("training-flips")
    store = Store(str(root / "store.db"))
    run_id = store.create_run(spec("grpo-flips", kind="training"), episodes_planned=10)
    draws = [("q-often", 0), ("q-learnt", 0), ("q-often", 1), ("q-often", 2), ("q-learnt", 2)]
    plays = []
    for g, (q, step_no) in enumerate(draws):
        for k in range(2):
            sample = 2 * step_no + k
            right = q == "q-learnt" and step_no == 2
            plays.append(
                (q, sample, ["DESCRIBE", "ANSWER" if right else "QUERY"], right, (step_no, g))
            )
    sink = store.sink(run_id)
    for play in plays:
        _play(sink, *play)
    store.set_run_status(run_id, "completed")
    store.close()
    proc, base_url = start_dashboard(f"sqlite:///{root / 'store.db'}", root / "dash.log")
    yield base_url, run_id
    stop(proc)


def test_a_flipped_questions_open_shows_it_at_both_steps(
    flipped: tuple[str, int], page: Any
) -> None:
    base_url, run_id = flipped
    page.goto(f"{base_url}/training?run={run_id}")
    page.get_by_text("Questions that flipped during training").wait_for()
    wait_idle(page)
    assert shown_value(page, "Question").startswith("q-often")
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.scroll_into_view_if_needed()
    grid.locator("[role='gridcell']").first.wait_for(state="attached")
    wait_idle(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 30, box["y"] + 35 + 17)  # its one row: q-learnt
    page.wait_for_url(re.compile(rf"/training\?run={run_id}&question=q-learnt$"))
    wait_shown(page, "Question", "q-learnt")
    for step in (0, 2):
        page.get_by_text(f"Training step {step}: ", exact=False).first.wait_for()
    assert len(page.context.pages) == 1


def test_compare_sets_two_training_steps_of_the_run_side_by_side(
    flipped: tuple[str, int], page: Any
) -> None:
    base_url, run_id = flipped
    page.goto(f"{base_url}/compare")
    picker = page.locator("[data-testid='stMultiSelect']").get_by_role("combobox")
    for step in (0, 2):
        picker.click()
        picker.fill(f"@ step {step}")
        option = f"grpo-flips (#{run_id}) @ step {step}"
        page.get_by_role("option", name=option, exact=True).click()
        wait_idle(page)
    page.wait_for_url(re.compile(rf"/compare\?run={run_id}(@|%40)0&run={run_id}(@|%40)2$"))
    # q-learnt, wrong at step 0 and right at step 2; q-often wrong at both: +50 points.
    page.get_by_text("grpo-flips @ step 2 − grpo-flips @ step 0: +50.0 pts").wait_for()
    page.get_by_text("only grpo-flips @ step 2: 1").wait_for()
    assert page.locator("[data-testid='stException']").count() == 0
    page.keyboard.press("Escape")
    wait_idle(page)
    screenshot(page, "compare-steps")
    page.reload()
    page.get_by_text("grpo-flips @ step 2 − grpo-flips @ step 0: +50.0 pts").wait_for()


def test_clicking_a_curves_point_opens_that_steps_episodes(
    flipped: tuple[str, int], page: Any
) -> None:
    base_url, run_id = flipped
    page.goto(f"{base_url}/training?run={run_id}")
    plot = page.locator(".js-plotly-plot").first  # Accuracy
    plot.wait_for()
    wait_idle(page)
    point = plot.evaluate(
        """gd => {
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const trace = gd.data[0], i = trace.x.indexOf(2);
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.d2p(2), box.top + ya._offset + ya.d2p(trace.y[i])];
        }"""
    )
    page.mouse.move(point[0], point[1])
    page.locator(".hoverlayer").get_by_text("step 2").first.wait_for()
    page.mouse.click(point[0], point[1])
    page.wait_for_url(re.compile(rf"/episodes\?run={run_id}&tmin=2&tmax=2$"))
    page.get_by_text("Episodes 1-4 of 4").wait_for()
    # One history entry: Back is Training again.
    page.go_back()
    page.wait_for_url(re.compile(rf"/training\?run={run_id}$"))
    plot.wait_for()


_DRAG_ENDS = """(gd, [low, high]) => {
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const box = gd.getBoundingClientRect(), left = box.left + xa._offset;
    return [left + xa.d2p(low), left + xa.d2p(high), box.top + ya._offset + ya._length / 2];
}"""


def _drag(page: Any, plot: Any, low: float, high: float) -> None:
    """Drag across a chart from training step `low` to `high`, as a user's mouse does."""
    start, end, y = plot.evaluate(_DRAG_ENDS, [low, high])
    page.mouse.move(start, y)
    page.mouse.down()
    page.mouse.move(end, y + 30, steps=8)
    page.mouse.up()


@pytest.fixture(scope="module")
def long_run(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A finished run of 240 training steps, one group of two a step: its curves are lines
    without a mark at each point."""
    root = tmp_path_factory.mktemp("training-long")
    store = Store(str(root / "store.db"))
    run_id = store.create_run(spec("grpo-long", kind="training"), episodes_planned=480)
    sink = store.sink(run_id)
    for step_no in range(240):
        for k in range(2):
            right = k == 0 and step_no >= 120
            actions = ["DESCRIBE", "ANSWER" if right else "QUERY"]
            _play(sink, "q1", 2 * step_no + k, actions, right, (step_no, step_no))
    store.set_run_status(run_id, "completed")
    store.close()
    proc, base_url = start_dashboard(f"sqlite:///{root / 'store.db'}", root / "dash.log")
    yield base_url, run_id
    stop(proc)


def test_dragging_across_a_long_curve_opens_the_episodes_of_its_steps(
    long_run: tuple[str, int], page: Any
) -> None:
    base_url, run_id = long_run
    page.goto(f"{base_url}/training?run={run_id}")
    page.get_by_text("Drag across steps to open their episodes.").wait_for()
    plot = page.locator(".js-plotly-plot").nth(1)  # Reward
    plot.wait_for()
    wait_idle(page)
    assert plot.evaluate("gd => gd.data[0].mode") == "lines"  # no point to click
    _drag(page, plot, 99.5, 110.5)
    page.wait_for_url(re.compile(rf"/episodes\?run={run_id}&tmin=100&tmax=110$"))
    page.get_by_text("Episodes 1-22 of 22").wait_for()
    page.go_back()
    page.wait_for_url(re.compile(rf"/training\?run={run_id}$"))
    plot.wait_for()


def test_a_drag_across_a_short_curve_opens_its_points_and_one_between_them_says_so(
    flipped: tuple[str, int], page: Any
) -> None:
    base_url, run_id = flipped
    page.goto(f"{base_url}/training?run={run_id}")
    page.get_by_text("or pick the box select tool and drag across steps").wait_for()
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for()
    wait_idle(page)
    plot.hover()
    plot.locator("[data-title='Box Select']").click()
    _drag(page, plot, 1.2, 1.8)
    page.get_by_text("No point between steps 1 and 2: drag across a point.").wait_for()
    assert re.search(rf"/training\?run={run_id}$", page.url)
    _drag(page, plot, 0.6, 2.4)
    page.wait_for_url(re.compile(rf"/episodes\?run={run_id}&tmin=1&tmax=2$"))
    page.get_by_text("Episodes 1-6 of 6").wait_for()
