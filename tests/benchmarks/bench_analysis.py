"""Speed of the analysis views: GRPO groups, failure classes and token shading on 100k
episodes / 1M steps, and the question x checkpoint map on 10 runs x 5,000 questions.

Run on request: `pytest tests/benchmarks/bench_analysis.py --benchmarks -s`.
Targets: every query (with what the page computes from it) under 300 ms, every page painted
under 1.5 s. ROLLSCOPE_BENCH_EPISODES scales the large store down, ROLLSCOPE_BENCH_MAP_QUESTIONS
and ROLLSCOPE_BENCH_MAP_SAMPLES the map's, for a quick check of the benchmark itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.dashboard.question_map.matrix import accuracy_intervals, build_map, flips
from storage.read_models import EpisodeFilter, GroupKey
from storage.store import Store
from tests.benchmarks.bench_dashboard import (
    EPISODES,
    PAINT_TARGET_S,
    QUERY_TARGET_S,
    STEPS_PER_EPISODE,
    _timings,
)
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, start_dashboard, stop
from tests.support.synthetic import fill_synthetic


def _best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    return min(_timings(fn, repeat))


# Filling 1M steps takes minutes on a loaded 2-core machine: past the suite's 300 s default.
pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(1800)]

MAP_RUNS = 10
MAP_QUESTIONS = int(os.environ.get("ROLLSCOPE_BENCH_MAP_QUESTIONS", "5000"))
MAP_SAMPLES = int(os.environ.get("ROLLSCOPE_BENCH_MAP_SAMPLES", "4"))
"""Samples per question and run in the map's store: a GRPO-sized group."""


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """4 runs x 25,000 episodes (25 samples of 1,000 questions) x ~10 steps, with tokens."""
    url = str(tmp_path_factory.mktemp("bench-analysis") / "big.db")
    store = Store(url)
    fill_synthetic(
        store, runs=4, episodes_per_run=EPISODES // 4, steps_per_episode=STEPS_PER_EPISODE
    )
    store.close()
    return url


@pytest.fixture(scope="module")
def map_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """10 runs x MAP_QUESTIONS questions x MAP_SAMPLES samples, 2-4 steps each."""
    url = str(tmp_path_factory.mktemp("bench-map") / "map.db")
    store = Store(url)
    fill_synthetic(
        store,
        runs=MAP_RUNS,
        episodes_per_run=MAP_QUESTIONS * MAP_SAMPLES,
        steps_per_episode=3,
        questions=MAP_QUESTIONS,
        name_prefix="ckpt",
    )
    store.close()
    return url


def _map_page(store: Store, run_ids: list[int]) -> int:
    """What the map page computes: the matrix, flips and bootstrap intervals."""
    qmap = build_map(store.outcome_matrix(run_ids))
    flips(qmap)
    accuracy_intervals(qmap)
    return len(qmap.question_ids)


def _report(title: str, rows: list[tuple[str, float]], target: float, unit: str) -> None:
    scale = 1000 if unit == "ms" else 1
    print(f"\n{title:40} {'best of 3':>10}  target {target * scale:.4g} {unit}")
    for name, seconds in rows:
        flag = "" if seconds < target else "  SLOW"
        print(f"{name:40} {seconds * scale:8.2f} {unit}{flag}")


def test_analysis_queries(big_store: str, map_store: str) -> None:
    store = Store(big_store)
    ids = [r.id for r in store.list_runs()]
    first = store.group_overview(ids[0]).groups[0].key
    queries: dict[str, Callable[[], Any]] = {
        "groups: overview of a run": lambda: store.group_overview(ids[0]),
        "groups: one group (25 episodes)": lambda: store.get_group(ids[0], first),
        "episodes: filter by failure class": lambda: store.list_episodes(
            EpisodeFilter(run_ids=(ids[0],), failure_classes=("sql_errors",)),
            limit=50,
            with_total=True,
        ),
        "runs: failure mix of every run": lambda: store.run_distributions(ids),
        "map: 4 runs x 1,000 questions": lambda: _map_page(store, ids),
    }
    rows = [(name, _best_of(fn)) for name, fn in queries.items()]
    store.close()
    store = Store(map_store)
    map_ids = [r.id for r in store.list_runs()][::-1]  # oldest first
    rows += [
        (
            f"map: {MAP_RUNS} runs x {MAP_QUESTIONS:,} questions",
            _best_of(lambda: _map_page(store, map_ids)),
        ),
        (
            f"map: outcome_matrix alone ({MAP_RUNS} x {MAP_QUESTIONS:,})",
            _best_of(lambda: store.outcome_matrix(map_ids)),
        ),
    ]
    store.close()
    _report("analysis query", rows, QUERY_TARGET_S, "ms")


def _paint(base_url: str, pages: dict[str, tuple[str, str]], warm: str) -> list[tuple[str, float]]:
    """Seconds from navigation to each page's selector, in a fresh Chromium."""
    from playwright.sync_api import sync_playwright

    results: list[tuple[str, float]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base_url}/runs")  # warm the server: the first load imports the pages
        page.wait_for_selector(warm, timeout=60_000)
        for name, (path, selector) in pages.items():
            times = []
            for _ in range(3):
                start = time.perf_counter()
                page.goto(base_url + path)
                if selector.startswith("js:"):
                    page.wait_for_function(selector[3:], timeout=60_000)
                else:
                    page.wait_for_selector(selector, timeout=60_000)
                times.append(time.perf_counter() - start)
            results.append((name, min(times)))
        browser.close()
    return results


def test_analysis_pages_paint(big_store: str, map_store: str, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Chromium at {CHROMIUM}")
    store = Store(big_store)
    ids = [r.id for r in store.list_runs()]
    key: GroupKey = store.group_overview(ids[0]).groups[0].key
    episode = store.list_episodes(EpisodeFilter(run_ids=(ids[0],)), limit=1).items[0].id
    store.close()
    # The map is painted when both its figures are drawn (heatmap, then accuracy line).
    plots = "js:document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2"
    big_pages = {
        "replay with token shading": (f"/replay?episode={episode}", ".rs-tokens .rs-tok"),
        "groups of a run": (f"/groups?run={ids[0]}", "text=/Questions by reward variance/"),
        "one group side by side": (
            f"/groups?run={ids[0]}&question={key.question_id}",
            "text=/Steps side by side/",
        ),
        "episodes of one failure class": (
            f"/episodes?run={ids[0]}&class=sql_errors",
            "text=/Episodes 1-\\d+ of/",
        ),
    }
    results: list[tuple[str, float]] = []
    proc, base_url = start_dashboard(big_store, tmp_path / "big.log")
    try:
        results += _paint(base_url, big_pages, "[data-testid='stDataFrame']")
    finally:
        stop(proc)
    store = Store(map_store)
    map_ids = [r.id for r in store.list_runs()][::-1]
    store.close()
    query = "&".join(f"run={i}" for i in map_ids)
    map_pages = {f"map {MAP_RUNS} runs x {MAP_QUESTIONS:,} questions": (f"/map?{query}", plots)}
    proc, base_url = start_dashboard(map_store, tmp_path / "map.log")
    try:
        results += _paint(base_url, map_pages, "[data-testid='stDataFrame']")
    finally:
        stop(proc)
    _report("analysis page", results, PAINT_TARGET_S, "s")
