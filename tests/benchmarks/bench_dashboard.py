"""Dashboard speed on a large store: each page's Store reads, and time to first paint in Chromium.

Run on request: `pytest tests/benchmarks/bench_dashboard.py --benchmarks -s`.
Targets: every page's queries under 300 ms, every page's data painted under 1.5 s from navigation.

ROLLSCOPE_BENCH_EPISODES sets the store's size (100,000 episodes of ~10 steps by default;
1000000 for the 1M-episode / 10M-step figures, a fill of many minutes).
ROLLSCOPE_BENCH_STORE=PATH keeps the filled store there and reuses it on the next run.
ROLLSCOPE_BENCH_SYSTEM_CHARS pads the system prompt (the runner's own, ~530 characters, by
default). Figures are the median of REPEAT runs (and the best), after one warm-up.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.read_models import EpisodeFilter
from storage.reads import TEXT_COUNT_CAP, TEXT_SEARCH_NEWEST
from storage.store import Store
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, start_dashboard, stop
from tests.support.synthetic import fill_synthetic

# A 1M-episode fill takes many minutes on a loaded machine: far past the default timeout.
pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(3 * 3600)]

COMPARE_LIST_CAP = 5000  # the questions the Compare page lists (app/dashboard/data.py)

EPISODES = int(os.environ.get("ROLLSCOPE_BENCH_EPISODES", "100000"))
KEPT_STORE = os.environ.get("ROLLSCOPE_BENCH_STORE", "")
SYSTEM_CHARS = int(os.environ.get("ROLLSCOPE_BENCH_SYSTEM_CHARS", "0")) or None
STEPS_PER_EPISODE = 10
QUERY_TARGET_S = 0.300
PAINT_TARGET_S = 1.5
REPEAT = 5


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(KEPT_STORE) if KEPT_STORE else tmp_path_factory.mktemp("bench") / "big.db"
    if path.exists():
        print(f"\nreusing {path} ({path.stat().st_size / 2**30:.2f} GiB)")
        return str(path)
    store = Store(str(path))
    start, load = time.perf_counter(), os.getloadavg()[0]
    fill_synthetic(
        store,
        runs=4,
        episodes_per_run=EPISODES // 4,
        steps_per_episode=STEPS_PER_EPISODE,
        system_prompt_chars=SYSTEM_CHARS,
    )
    store.close()
    seconds = time.perf_counter() - start
    with closing(sqlite3.connect(path)) as conn:
        steps = conn.execute("SELECT count(*) FROM steps").fetchone()[0]
    size = path.stat().st_size + sum(
        p.stat().st_size for p in path.parent.glob(path.name + "-*") if p.is_file()
    )
    print(
        f"\nfilled {EPISODES:,} episodes, {steps:,} steps in {seconds:.0f} s "
        f"({steps / seconds:,.0f} step rows/s; load average {load:.1f} -> "
        f"{os.getloadavg()[0]:.1f}): {size / 2**30:.2f} GiB, {size / steps:.0f} bytes/step"
    )
    return str(path)


def _timings(fn: Callable[[], Any], repeat: int = REPEAT) -> list[float]:
    fn()  # warm-up: the first read of a cold page cache is not what a page sees twice
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _page_queries(store: Store) -> dict[str, Callable[[], Any]]:
    runs = store.list_runs()
    ids = [r.id for r in runs]
    first = store.list_episodes(EpisodeFilter(run_ids=tuple(ids[:1])), limit=50)
    episode_id = first.items[0].id
    return {
        "runs": lambda: (store.list_runs(), store.run_distributions(ids)),
        "episodes": lambda: store.list_episodes(
            EpisodeFilter(run_ids=tuple(ids[:1])), limit=50, with_total=True
        ),
        # As the Episodes page searches: its total counted up to the page's cap.
        "episodes (text search)": lambda: store.list_episodes(
            EpisodeFilter(text="singer", text_newest=TEXT_SEARCH_NEWEST),
            limit=50,
            with_total=True,
            total_cap=TEXT_COUNT_CAP,
        ),
        # A word no episode holds: the page reads the newest TEXT_SEARCH_NEWEST episodes...
        "episodes (rare text)": lambda: store.list_episodes(
            EpisodeFilter(text="zq-no-such-text", text_newest=TEXT_SEARCH_NEWEST),
            limit=50,
            with_total=True,
            total_cap=TEXT_COUNT_CAP,
        ),
        "episodes (rare text, 2 runs)": lambda: store.list_episodes(
            EpisodeFilter(
                run_ids=tuple(ids[:2]), text="zq-no-such-text", text_newest=TEXT_SEARCH_NEWEST
            ),
            limit=50,
            with_total=True,
            total_cap=TEXT_COUNT_CAP,
        ),
        # ... and every episode with "Search all episodes" ticked (not held to the target).
        "episodes (rare text, all)": lambda: store.list_episodes(
            EpisodeFilter(text="zq-no-such-text"),
            limit=50,
            with_total=True,
            total_cap=TEXT_COUNT_CAP,
        ),
        "episodes (sorted by reward)": lambda: store.list_episodes(
            EpisodeFilter(), sort="reward", descending=True, limit=50, with_total=True
        ),
        "replay": lambda: store.get_episode(episode_id),
        "compare (statistics)": lambda: store.compare_outcomes(ids[:2]),
        "compare (question list)": lambda: _all_questions(store, ids[:2]),
        "compare (one question)": lambda: store.compare_question(ids[:2], "q00000"),
    }


def _all_questions(store: Store, run_ids: list[int]) -> int:
    # What the Compare page lists with text: the questions, 500 a page, up to its cap.
    count, cursor = 0, None
    while count < COMPARE_LIST_CAP:
        page = store.compare_runs(run_ids, limit=500, cursor=cursor, with_episode_ids=False)
        count += len(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return count


def test_store_queries_per_page(big_store: str) -> None:
    store = Store(big_store, read_only=True)  # as the dashboard opens it
    rows = [(name, _timings(fn)) for name, fn in _page_queries(store).items()]
    print(f"\n{EPISODES:,} episodes; load average {os.getloadavg()[0]:.1f}")
    print(f"{'page query':32} {'median':>9} {'best':>9}  target {QUERY_TARGET_S * 1000:.0f} ms")
    for name, times in rows:
        median = statistics.median(times)
        flag = "" if median < QUERY_TARGET_S else "  SLOW"
        if name.endswith(", all)"):
            flag = "  (on request: no target)"
        print(f"{name:32} {median * 1000:6.1f} ms {min(times) * 1000:6.1f} ms{flag}")
    store.close()


# Set before any page script runs, on every load: notes when each page's sign of data is first
# drawn and the long tasks (main thread busy over 50 ms) until then and after. Timed in the page,
# as the driver cannot: its wait polls at growing intervals (up to 500 ms apart) and does not
# run while the page's main thread draws the rest of the page.
_WATCH = """
window.__paint = {first: null, longTasks: []};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__paint.longTasks.push(e.startTime + e.duration);
}).observe({type: 'longtask', buffered: true});
new MutationObserver((_, observer) => {
  const sign = window.__paintSign;
  if (!sign || !document.body) return;
  const found = sign.css ? document.querySelector(sign.css) !== null
                         : document.body.textContent.includes(sign.text);
  if (!found) return;
  observer.disconnect();
  // The frame that draws it: rendering starts when this callback returns.
  requestAnimationFrame(() => { window.__paint.first = performance.now(); });
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
# Seconds without a long task after which a page counts as idle.
QUIET_S = 1.0


def test_first_meaningful_paint_per_page(big_store: str, tmp_path: Path) -> None:
    """Per page, from navigation start: the frame that first draws its data, and when its main
    thread is free again (the end of its last long task: clicks before then wait)."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    store = Store(big_store)
    ids = [r.id for r in store.list_runs()]
    episode = store.list_episodes(EpisodeFilter(run_ids=tuple(ids[:1])), limit=1).items[0].id
    store.close()
    # What each page shows once its data is on screen: a CSS selector or a text.
    pages: dict[str, tuple[str, dict[str, str]]] = {
        "runs": ("/runs", {"css": "[data-testid='stDataFrame']"}),
        "episodes": (f"/episodes?run={ids[0]}", {"text": "Episodes 1-50 of"}),
        "replay": (f"/replay?episode={episode}", {"text": "Step 1 of"}),
        "compare": (f"/compare?run={ids[0]}&run={ids[1]}", {"text": "95% CI"}),
    }
    proc, base_url = start_dashboard(big_store, tmp_path / "dashboard.log")
    results: list[tuple[str, float, float, float]] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(_WATCH)
            page.goto(f"{base_url}/runs")  # warm the server: first load imports the pages
            page.wait_for_selector(pages["runs"][1]["css"], timeout=60_000)
            # Once per page: a second load would come from the page's cached reads.
            for name, (path, sign) in pages.items():
                page.add_init_script(f"window.__paintSign = {json.dumps(sign)};")
                start = time.perf_counter()
                page.goto(base_url + path)
                # As a test would wait for it: the figure these benchmarks gave before.
                page.wait_for_selector(sign.get("css") or f"text={sign['text']}", timeout=60_000)
                seen = time.perf_counter() - start
                page.wait_for_function("window.__paint.first !== null", timeout=60_000)
                first, idle = _paint_and_idle(page)
                results.append((name, first, idle, seen))
            browser.close()
    finally:
        stop(proc)
    load = os.getloadavg()[0]
    print(f"\n{EPISODES:,} episodes; load average {load:.1f}; seconds from navigation start")
    print(f"{'page':12} {'first paint':>12} {'idle':>7} {'driver saw it':>14}  "
          f"target {PAINT_TARGET_S:.1f} s (first paint)")  # fmt: skip
    for name, first, idle, seen in results:
        flag = "" if first < PAINT_TARGET_S else "  SLOW"
        print(f"{name:12} {first:10.2f} s {idle:5.2f} s {seen:12.2f} s{flag}")


def _paint_and_idle(page: Any) -> tuple[float, float]:
    """(first paint, idle) of the page shown, in seconds from its navigation start; idle once
    `QUIET_S` has passed with no long task."""
    deadline = time.perf_counter() + 60
    while True:
        now, first, ends = page.evaluate(
            "[performance.now(), window.__paint.first, window.__paint.longTasks]"
        )
        last = max(ends, default=first)
        if now - max(last, first) >= QUIET_S * 1000 or time.perf_counter() > deadline:
            return first / 1000, max(last, first) / 1000
        page.wait_for_timeout(200)
