"""Runs written through the Store's sink for the export tests and benchmark: any size, with
columns that stay null for the first episodes and are set later."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rollout_core.records import (
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    Outcome,
    RunSpec,
    StepRecord,
)
from storage.store import Store

_FILLER = "".join(f"row {i}: singer, concert, stadium, country, age; " for i in range(4_000))


def late_answer(i: int) -> str | None:
    """The answer episode i gets when its columns are set: every third one has none (error)."""
    return None if i % 3 == 2 else f"answer {i}"


def write_run(
    store: Store,
    name: str,
    episodes: int,
    *,
    steps: int = 3,
    prompt_chars: int = 200,
    set_from: int = 0,
    per_batch: int = 100,
) -> int:
    """A completed run of `episodes` episodes of `steps` steps; returns its id.

    Episodes before `set_from` have no answer, no error and no token counts, and their steps no
    error: columns all null in the first rows. From `set_from` on, episode i is correct, wrong
    or an error (i % 3), with an answer (`late_answer`), step 1 failed, tokens counted.
    """
    spec = RunSpec(
        name=name,
        policy=f"hf:/checkpoints/{name}",
        dataset="demo",
        questions_path="/data/questions.json",
        db_dir="/data/db",
        checkpoint=f"/checkpoints/{name}",
    )
    run_id = store.create_run(spec, episodes_planned=episodes)
    sink = store.sink(run_id)
    for first in range(0, episodes, per_batch):
        batch = [
            _episode(i, steps, prompt_chars, i >= set_from)
            for i in range(first, min(episodes, first + per_batch))
        ]
        sink.write(
            IterationBatch(
                started=[b[0] for b in batch],
                steps=[s for b in batch for s in b[1]],
                finished=[b[2] for b in batch],
            )
        )
    store.set_run_status(run_id, "completed")
    return run_id


def _episode(
    i: int, n_steps: int, prompt_chars: int, late: bool
) -> tuple[EpisodeStart, list[StepRecord], EpisodeRecord]:
    q = f"q{i:05d}"
    start = EpisodeStart(q, 0, i, "concert_singer", f"How many singers for {q}?", "SELECT 1")
    steps = []
    for k in range(1, n_steps + 1):
        last = k == n_steps
        head = f"episode {i} step {k}: "
        at = (i * 7 + k) % 1000
        steps.append(
            StepRecord(
                question_id=q,
                sample_index=0,
                step_no=k,
                prompt=(
                    {
                        "role": "user",
                        "content": head + _FILLER[at : at + max(0, prompt_chars - len(head))],
                    },
                ),
                raw_output="ANSWER: 4" if last else f"QUERY: SELECT {k}",
                action="ANSWER" if last else "QUERY",
                argument="4" if last else f"SELECT {k}",
                parsed=True,
                observation="Answer submitted." if last else f"{k}",
                error=f"no such table: t{i}" if late and k == 1 and not last else None,
                reward=1.0 if last else 0.0,
                done=last,
                tokens_in=100 * k if late else None,
                tokens_out=5 if late else None,
                policy_seconds=0.01,
                env_seconds=0.001,
            )
        )
    late_outcomes: tuple[Outcome, ...] = ("correct", "wrong", "error")
    outcome: Outcome = late_outcomes[i % 3] if late else "budget_exhausted"
    finish = EpisodeRecord(
        question_id=q,
        sample_index=0,
        outcome=outcome,
        reward=1.0 if outcome == "correct" else 0.0,
        progress=0.0,
        operational=float(n_steps),
        steps=n_steps,
        answer=late_answer(i) if late else None,
        duration_seconds=0.5,
        error=f"grader failed on {q}" if outcome == "error" else None,
    )
    return start, steps, finish


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
