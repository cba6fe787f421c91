"""The Runs table while a run plays: its row follows the progress without a reload."""

from __future__ import annotations

import re
from contextlib import ExitStack
from typing import Any

import pytest

from storage.store import Store
from tests.browser.conftest import Dashboard
from tests.browser.ui import wait_idle, wait_shown
from tests.support.benchmark import QUESTIONS
from tests.support.dashboard_stores import episode_batch

pytestmark = pytest.mark.browser


def _row(page: Any, name: str) -> Any:
    return page.locator("[data-testid='stDataFrame'] tbody tr", has_text=name).first


def test_the_runs_table_follows_a_running_run(dashboard: Dashboard, page: Any) -> None:
    # Issue 12, bug 3: the bar read "running, 48/484" while the row said 0 episodes.
    fx = dashboard.store
    page.goto(dashboard.url("/runs"))
    page.get_by_text("ckpt-3000: running, 1/10 episodes").wait_for()
    wait_idle(page)
    row = _row(page, "ckpt-3000")
    row.wait_for(state="attached")
    assert "1/10" in row.inner_text()
    store = Store(fx.url)
    try:
        for qid, text, gold in QUESTIONS[1:3]:
            store.sink(fx.running).write(episode_batch(fx.db_dir, qid, text, gold, correct=True))
        store.heartbeat(fx.running)
    finally:
        store.close()
    page.get_by_text("ckpt-3000: running, 3/10 episodes").wait_for()
    # The table row shows the same count, read by the same refresh (no reload).
    page.wait_for_function(
        """() => [...document.querySelectorAll("[data-testid='stDataFrame'] tbody tr")]
            .some(tr => tr.innerText.includes("ckpt-3000") && tr.innerText.includes("3/10"))""",
        timeout=30_000,
    )
    assert re.search(r"3/10", _row(page, "ckpt-3000").inner_text())


PAGES_WAITING = {
    "runs": "No runs yet",
    "episodes": "No runs yet",
    "training": "No training runs yet",
    "groups": "No runs yet",
    "compare": "Compare needs",
    "map": "The map needs",
}


def test_pages_opened_on_an_empty_store_show_each_run_as_it_begins(
    chromium: Any, tmp_path: Any
) -> None:
    # `make run` serves the dashboard while the demo is built: its pages open on an empty
    # store, and a page that said "no runs yet" stayed so until a reload; Compare and the map
    # waited for a reload after the second run began, and Runs, with no run playing, never
    # showed a follower started beside it. Every page is open at once: one dashboard serves
    # them all, as it serves a user's tabs.
    from tests.browser.conftest import open_page, start_dashboard, stop
    from tests.support.records import play, spec
    from tests.support.stores import write_run

    url = str(tmp_path / "store.db")
    store = Store(url)
    proc, base = start_dashboard(url, tmp_path / "dashboard.log")
    try:
        with ExitStack() as tabs:
            pages = {route: tabs.enter_context(open_page(chromium)) for route in PAGES_WAITING}
            for route, page in pages.items():
                page.goto(f"{base}/{route}")
            for route, page in pages.items():
                page.get_by_text(PAGES_WAITING[route]).wait_for()
                wait_idle(page)
            write_run(store, spec("begun-later", kind="training"), [play("q1", 0, "wrong", 0, 1)])
            for route in ("runs", "episodes"):
                _row(pages[route], "begun-later").wait_for(state="attached", timeout=30_000)
            wait_shown(pages["training"], "Training run", "begun-later")
            wait_shown(pages["groups"], "Run", "begun-later")
            # One run is not enough to compare: Compare and the map wait for the second.
            for route in ("compare", "map"):
                pages[route].get_by_text(PAGES_WAITING[route]).wait_for()
                wait_idle(pages[route])
            write_run(store, spec("second"), [play("q1", 0, "correct", 1, 1)])
            for route in ("compare", "map"):
                waiting = pages[route].get_by_text(PAGES_WAITING[route])
                waiting.wait_for(state="detached", timeout=30_000)
            # Runs, with no run playing, shows a run created after it loaded.
            store.create_run(spec("followed-later"), episodes_planned=0)
            _row(pages["runs"], "followed-later").wait_for(state="attached", timeout=30_000)
            for route, page in pages.items():
                assert page.locator("[data-testid='stException']").count() == 0, route
    finally:
        store.close()
        stop(proc)
