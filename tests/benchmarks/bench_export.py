"""Export speed and memory: runs of 2,000 and 20,000 episodes (10 steps, 3 kB prompts), each
format exported in a fresh process, peak RSS and episodes per second printed.

Run on request: `pytest tests/benchmarks/bench_export.py --benchmarks -s`.
`whole` only holds every episode of the run in a list: what an exporter that gathers the run
first would need at least. Streaming exports should stay flat from 2k to 20k episodes.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from storage.store import Store
from tests.support.export_memory import measure_export
from tests.support.stores import sized_run

pytestmark = pytest.mark.benchmark

# ROLLSCOPE_BENCH_EXPORT_SIZES scales the runs down for a quick check of the benchmark itself.
SIZES = [int(n) for n in os.environ.get("ROLLSCOPE_BENCH_EXPORT_SIZES", "2000,20000").split(",")]
STEPS, PROMPT_CHARS, REPEAT = 10, 3_000, 3
MB = 2**20


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    urls = {}
    for n in SIZES:
        url = f"sqlite:///{tmp_path_factory.mktemp('export-bench') / f'{n}.db'}"
        store = Store(url)
        sized_run(store, f"run-{n}", n, steps=STEPS, prompt_chars=PROMPT_CHARS, set_from=n // 2)
        store.close()
        urls[n] = url
    return urls


def test_export_speed_and_memory(stores: dict[int, str], tmp_path: Path) -> None:
    print(f"\nexport of one run: {STEPS} steps of {PROMPT_CHARS} chars per episode, median of "
          f"{REPEAT} (whole: 1); RSS of the exporting process")  # fmt: skip
    print(f"{'episodes':>9} {'format':>8} {'ep/s':>7} {'base MB':>8} {'peak MB':>8} "
          f"{'grown MB':>9} {'file MB':>8}")  # fmt: skip
    for n, url in stores.items():
        for fmt in ("jsonl", "parquet", "whole"):
            out = tmp_path / f"{n}.{fmt}"
            repeat = 1 if fmt == "whole" else REPEAT
            runs = [measure_export(url, [1], fmt, out) for _ in range(repeat)]
            assert all(r["episodes"] == n for r in runs)
            rate = statistics.median(r["episodes"] / r["seconds"] for r in runs)
            base = statistics.median(r["base"] for r in runs) / MB
            peak = statistics.median(r["peak"] for r in runs) / MB
            size = out.stat().st_size / MB if out.exists() else 0.0
            print(f"{n:>9} {fmt:>8} {rate:>7.0f} {base:>8.0f} {peak:>8.0f} {peak - base:>9.0f} "
                  f"{size:>8.1f}")  # fmt: skip
