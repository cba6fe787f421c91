"""The Training page in a real Chromium, following a training run live as episodes land."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rollout_core.settings import TrainingSettings
from storage.store import Store
from tests.app.test_dashboard_training import _play
from tests.browser.conftest import screenshot, start_dashboard, stop
from tests.storage.store_builders import spec

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
