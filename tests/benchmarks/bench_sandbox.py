"""What the sandbox's memory ceiling costs per query: the same queries with and without it.

Run with `pytest tests/benchmarks/bench_sandbox.py -s --benchmarks`. BENCH_QUERIES (2,000 per
round) and BENCH_REPEATS (5 rounds; the median is reported). Uses Spider's concert_singer when
present, else the test fixture's database.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pytest

from rollout_core import sandbox as sandbox_module
from rollout_core.heap_limit import heap_ceiling
from rollout_core.sandbox import Sandbox
from tests.conftest import spider_dir
from tests.support.benchmark import make_benchmark

QUERIES = {
    "SELECT 1": "SELECT 1",
    "count": "SELECT count(*) FROM singer",
    "group by": "SELECT country, count(*), avg(age) FROM singer GROUP BY country ORDER BY 2 DESC",
}


def _database(tmp_path: Path) -> Path:
    spider = spider_dir()
    if spider is not None:
        return spider / "database" / "concert_singer" / "concert_singer.sqlite"
    _, db_dir = make_benchmark(tmp_path)
    return db_dir / "concerts" / "concerts.sqlite"


def _per_query_us(run: Callable[[], object], count: int, repeats: int) -> float:
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(count):
            run()
        rounds.append((time.perf_counter() - t0) / count * 1e6)
    return statistics.median(rounds)


def test_ceiling_overhead_per_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ceiling = heap_ceiling()
    if ceiling is None:
        pytest.skip("no ctypes access to SQLite here: the permanent limit has no per-query cost")
    count = int(os.environ.get("BENCH_QUERIES", 2_000))
    repeats = int(os.environ.get("BENCH_REPEATS", 5))
    db = _database(tmp_path)
    print(f"\nper query, median of {repeats} rounds of {count} ({db.name})")

    def bare() -> None:
        with ceiling.around(128 * 1024 * 1024):
            pass

    print(f"  ceiling enter + exit alone: {_per_query_us(bare, count, repeats):7.2f} us")
    with Sandbox() as sandbox:
        for name, sql in QUERIES.items():
            assert sandbox.run_select(db, sql).error is None
            with_ceiling = _per_query_us(lambda s=sql: sandbox.run_select(db, s), count, repeats)
            with monkeypatch.context() as patch:
                patch.setattr(sandbox_module, "_memory_ceiling", lambda limits: nullcontext())
                without = _per_query_us(lambda s=sql: sandbox.run_select(db, s), count, repeats)
            print(
                f"  {name:>8}: {with_ceiling:7.1f} us with the ceiling, {without:7.1f} us"
                f" without ({with_ceiling - without:+.1f} us)"
            )
