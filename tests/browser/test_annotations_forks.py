"""Labels and forks in Chromium: an episode labelled with a new tag on Replay and found again
through the Episodes tag filter; a fork launched from Replay, seen to complete, and compared."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app import batch
from rollout_core.specs import RunRequest
from storage.read_models import EpisodeDetail
from storage.store import Store
from tests.browser.conftest import open_page, screenshot, start_dashboard, stop
from tests.browser.ui import keyed, pick, table_rows, wait_idle
from tests.support.benchmark import make_benchmark

pytestmark = pytest.mark.browser

WORKER_TIMEOUT_MS = 180_000  # the worker process imports the engine, then plays one episode


@dataclass(frozen=True)
class Served:
    base_url: str
    url: str
    run_id: int
    source: EpisodeDetail
    """A recorded episode of at least three steps (forked at step 2)."""

    def at(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


@pytest.fixture(scope="module")
def served(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real `random` run on the fixture benchmark, served by a writable dashboard."""
    root = tmp_path_factory.mktemp("forks")
    questions, db_dir = make_benchmark(root / "bench")
    url = str(root / "store.db")
    store = Store(url)
    request = RunRequest(
        policy="random", questions=str(questions), db_dir=str(db_dir), samples=2, name="rnd"
    )
    run_id, prepared = batch.start_run(store, request)
    batch.play_run(store, run_id, prepared)
    source = next(d for d in store.iter_episode_details(run_id) if len(d.steps) >= 3)
    store.close()
    proc, base_url = start_dashboard(url, root / "dashboard.log")
    yield Served(base_url, url, run_id, source)
    stop(proc)


def test_a_new_tag_on_replay_is_found_through_the_episodes_tag_filter(
    served: Served, page: Any
) -> None:
    from playwright.sync_api import expect  # the browser tests skip without it

    episode = served.source.summary.id
    page.goto(served.at(f"/replay?episode={episode}&step=2"))
    page.get_by_text("No labels yet.").wait_for()
    wait_idle(page)
    tag = keyed(page, "rp_label_tag").get_by_role("combobox")
    tag.click()
    tag.fill("needs-review")
    page.keyboard.press("Enter")  # a new option, typed
    note = keyed(page, "rp_label_note").locator("textarea")
    note.fill("<b>looked twice</b> at step 2")
    keyed(page, "rp_label_on_step").locator("label").click()
    page.get_by_role("button", name="Add label").click()
    page.get_by_text("needs-review", exact=True).wait_for()
    # The form empties once the label is added; until then the note is in the box as well.
    expect(note).to_have_value("")
    page.get_by_text("<b>looked twice</b> at step 2").wait_for()  # the note as text
    (made,) = Store(served.url).annotations(episode)
    assert (made.tag, made.step, made.note) == ("needs-review", 2, "<b>looked twice</b> at step 2")

    page.goto(served.at("/episodes?tag=needs-review"))
    page.get_by_text("Episodes 1-1 of 1").wait_for()
    wait_idle(page)
    rows = table_rows(page)
    assert len(rows) == 1 and "needs-review" in rows[0]
    screenshot(page, "episodes-tag-filter")


def test_a_fork_launched_from_replay_completes_and_compare_shows_where_it_takes_over(
    served: Served, page: Any
) -> None:
    source = served.source
    page.goto(served.at(f"/replay?episode={source.summary.id}&step=2"))
    page.get_by_text("Continue from this step with…").wait_for()
    wait_idle(page)
    pick(page, "Policy / checkpoint", "oracle")
    wait_idle(page)
    page.get_by_role("button", name="Continue from step 2").click()
    page.get_by_text(re.compile(r"Fork run #\d+ queued from step 2")).wait_for()
    page.get_by_role("link", name=re.compile(r"Follow run #\d+")).click()
    page.get_by_text(re.compile("Completed: accuracy 100.0% over 1 episode[.]")).wait_for(
        timeout=WORKER_TIMEOUT_MS
    )
    store = Store(served.url)
    fork = store.list_runs()[0]
    assert fork.kind == "fork" and fork.status == "completed"

    page.goto(
        served.at(
            f"/compare?run={served.run_id}&run={fork.id}&question={source.summary.question_id}"
        )
    )
    page.get_by_text(
        f"continues rnd's episode {source.summary.id} from step 2", exact=False
    ).wait_for()
    page.get_by_text(re.compile(r"Step 2\s+◀ fork: .* plays from here")).wait_for()
    assert page.get_by_text(re.compile("replayed")).count() >= 1
    page.set_viewport_size({"width": 1400, "height": 3200})  # the page scrolls inside
    wait_idle(page)
    screenshot(page, "compare-fork")


@pytest.mark.parametrize("width", [800, 1400])
def test_replay_with_labels_and_fork_controls_fits(
    served: Served, chromium: Any, width: int
) -> None:
    store = Store(served.url)
    episode = served.source.summary.id
    if not store.annotations(episode):
        store.annotate(episode, "wrong-join", note="joined singer on the concert id")
    with open_page(chromium, width=width, height=2300) as pg:  # the whole page: it scrolls inside
        pg.goto(served.at(f"/replay?episode={episode}&step=2"))
        pg.get_by_text("Continue from this step with…").wait_for()
        wait_idle(pg)
        path: Path = screenshot(pg, f"replay-labels-fork-{width}")
        # Nothing wider than the window: no horizontal scroll bar at 800 px.
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{width}px: {overflow}px wider than the window ({path})"
