"""The Runs table while a run plays: its row follows the progress without a reload."""

from __future__ import annotations

import re
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


def test_runs_shows_a_run_begun_after_it_loaded(chromium: Any, tmp_path: Any) -> None:
    # With no run playing nothing refreshed the page: a follower started beside it never
    # showed until a reload.
    from tests.browser.conftest import open_page, start_dashboard, stop
    from tests.support.records import play, spec
    from tests.support.stores import write_run

    url = str(tmp_path / "store.db")
    store = Store(url)
    write_run(store, spec("finished-run"), [play("q1", 0, "correct", 1.0, 1)])
    proc, base = start_dashboard(url, tmp_path / "dashboard.log")
    try:
        with open_page(chromium) as page:
            page.goto(base + "/runs")
            _row(page, "finished-run").wait_for(state="attached")
            wait_idle(page)
            store.create_run(spec("followed-later"), episodes_planned=0)
            _row(page, "followed-later").wait_for(state="attached", timeout=30_000)
    finally:
        store.close()
        stop(proc)


@pytest.mark.parametrize("route", ["runs", "episodes", "training", "groups"])
def test_a_page_on_an_empty_store_shows_the_first_run_when_it_begins(
    chromium: Any, tmp_path: Any, route: str
) -> None:
    # `make run` serves the dashboard while the demo is built: its pages open on an empty
    # store, and a page that said "no runs yet" stayed so until a reload.
    from tests.browser.conftest import open_page, start_dashboard, stop
    from tests.support.records import play, spec
    from tests.support.stores import write_run

    url = str(tmp_path / "store.db")
    store = Store(url)
    proc, base = start_dashboard(url, tmp_path / "dashboard.log")
    try:
        with open_page(chromium) as page:
            page.goto(f"{base}/{route}")
            empty = page.get_by_text(re.compile(r"No (training )?runs yet"))
            empty.wait_for()
            wait_idle(page)
            write_run(store, spec("begun-later", kind="training"), [play("q1", 0, "wrong", 0, 1)])
            empty.wait_for(state="detached", timeout=30_000)
            if route in ("runs", "episodes"):
                _row(page, "begun-later").wait_for(state="attached")
            else:
                wait_shown(page, "Training run" if route == "training" else "Run", "begun-later")
            assert page.locator("[data-testid='stException']").count() == 0
    finally:
        store.close()
        stop(proc)


@pytest.mark.parametrize(
    ("route", "needs"), [("compare", "Compare needs"), ("map", "The map needs")]
)
def test_compare_and_the_map_show_the_second_run_when_it_begins(
    chromium: Any, tmp_path: Any, route: str, needs: str
) -> None:
    # One run is not enough for them: the page waited for a reload after the second began.
    from tests.browser.conftest import open_page, start_dashboard, stop
    from tests.support.records import play, spec
    from tests.support.stores import write_run

    url = str(tmp_path / "store.db")
    store = Store(url)
    write_run(store, spec("first"), [play("q1", 0, "wrong", 0, 1)])
    proc, base = start_dashboard(url, tmp_path / "dashboard.log")
    try:
        with open_page(chromium) as page:
            page.goto(f"{base}/{route}")
            waiting = page.get_by_text(needs)
            waiting.wait_for()
            wait_idle(page)
            write_run(store, spec("second"), [play("q1", 0, "correct", 1, 1)])
            waiting.wait_for(state="detached", timeout=30_000)
            assert page.locator("[data-testid='stException']").count() == 0
    finally:
        store.close()
        stop(proc)
