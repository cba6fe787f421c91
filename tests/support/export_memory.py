"""An export measured in a fresh process: its time, its peak memory, and the bytes it
allocated (for the export tests and benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_MEASURE = """
import json, resource, sys, time, tracemalloc
from pathlib import Path
import pyarrow as pa
from app.export import export_episodes
from storage.store import Store

def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

url, run_ids, fmt, out, trace = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:]
store = Store(url)
pa.array([0])  # pyarrow's one-time setup (~55 MB: it imports pandas) is not the export's
if trace == "1":
    tracemalloc.start()
base, start = peak_rss(), time.perf_counter()
if fmt == "whole":  # what any exporter that holds the run would hold at least
    held = [d for r in run_ids for d in store.iter_episode_details(r)]
    n = len(held)
else:
    n = export_episodes(store, run_ids, Path(out), fmt)
seconds = time.perf_counter() - start
traced = tracemalloc.get_traced_memory()[1] + pa.default_memory_pool().max_memory()
print(json.dumps({"episodes": n, "seconds": seconds, "base": base, "peak": peak_rss(),
                  "traced": traced if trace == "1" else None}))
"""


def measure_export(
    url: str, run_ids: list[int], fmt: str, out: Path, *, trace: bool = False
) -> dict[str, float]:
    """Export in a fresh process (`fmt` jsonl, parquet, or `whole`: only hold every episode).

    Returns episodes, seconds, the process's peak RSS before (`base`) and after (`peak`), and
    with `trace` the peak bytes it allocated (`traced`: Python's tracemalloc plus Arrow's pool;
    exact, unlike RSS, which a busy machine can lower by dropping shared-library pages).
    """
    res = subprocess.run(
        [sys.executable, "-c", _MEASURE, url, json.dumps(run_ids), fmt, str(out), str(int(trace))],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    figures: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return figures
