"""Write speed of the runner's sink: step rows per second into a SQLite store.

Run on request: `pytest tests/benchmarks/bench_sink.py --benchmarks -s`.
Target: at least 50,000 step rows/s. The batches are what the runner hands the sink: one
iteration of B live episodes (B step records, the episodes that started and finished), the
runner's own chat messages growing turn by turn, outputs and observations of realistic length
(`tests.support.synthetic_text`). Only `sink.write` (and the last `flush`) is timed; building the
records is not. Two modes: one transaction per iteration, and the batch runs' grouping
(`app.batch.SINK_GROUP_SECONDS`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from app.batch import SINK_GROUP_SECONDS
from rollout_core.records import (
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    RunSpec,
    StepRecord,
)
from storage.store import Store
from tests.support.synthetic_text import (
    DBS,
    TextPools,
    first_messages,
    question_text,
    system_prompt,
)

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(1800)]

# ROLLSCOPE_BENCH_SINK_STEPS scales the measurement down for a quick check of the benchmark.
STEPS = int(os.environ.get("ROLLSCOPE_BENCH_SINK_STEPS", "30000"))
REPEAT = 3
TARGET = 50_000
CASES = [  # (batch size, system prompt characters: None is the runner's own, ~530)
    (64, None),
    (256, None),
    (64, 2_000),
    (64, 20_000),  # a real model's chat template with tool descriptions
]
# A transaction per runner iteration (fan-out workers, training), and the batch runs' grouping.
MODES = [("per iteration", 0.0), (f"grouped {SINK_GROUP_SECONDS:g} s", SINK_GROUP_SECONDS)]


def iterations(
    batch: int, system_chars: int | None, total_steps: int, seed: int = 0
) -> Iterator[IterationBatch]:
    """The batches a runner with `batch` slots writes until `total_steps` steps are written."""
    rng = random.Random(seed)
    pools = TextPools(random.Random(seed + 1))
    system = system_prompt(system_chars, 10)
    live: list[dict[str, object]] = []
    next_q = written = 0
    while written < total_steps:
        started = []
        while len(live) < batch:
            q = next_q
            next_q += 1
            question, db = question_text(q % 1000), DBS[q % len(DBS)]
            prompt = first_messages(system, question, db)
            started.append(EpisodeStart(f"q{q}", 0, q, db, question, "SELECT 1"))
            live.append({"q": f"q{q}", "prompt": prompt, "n": 0, "steps": rng.randint(4, 12)})
        steps, finished, still = [], [], []
        for ep in live:
            n = int(ep["n"]) + 1  # type: ignore[call-overload]
            last = n == ep["steps"]
            action = "ANSWER" if last else rng.choice(("DESCRIBE", "SAMPLE", "QUERY"))
            # Failed actions at the synthetic store's rate: a batch's error columns are not
            # all NULL, as a real run's are not.
            error = "no such column: singer.nme" if not last and rng.random() < 0.15 else None
            text = pools.step(rng, action, parsed=True, error=error, correct=rng.random() < 0.5)
            prompt = list(ep["prompt"])  # type: ignore[call-overload]
            chars = sum(len(m["content"]) for m in prompt)
            steps.append(
                StepRecord(
                    question_id=str(ep["q"]), sample_index=0, step_no=n, prompt=prompt,
                    raw_output=text.raw_output, action=action, argument=text.argument,
                    parsed=True, observation=text.observation, error=error, reward=0.0,
                    done=last, tokens_in=chars // 4, tokens_out=len(text.raw_output) // 4,
                    policy_seconds=0.05, env_seconds=0.001,
                )
            )  # fmt: skip
            if last:
                # Classified, as the runner's records are.
                finished.append(
                    EpisodeRecord(
                        str(ep["q"]), 0, "correct", 1.0, 0.0, 1.0, n, "4", 0.5,
                        failure_class="correct",
                    )
                )  # fmt: skip
            else:
                # The next prompt: this one with the turn and its answer, as the runner grows it.
                turn = [
                    {"role": "assistant", "content": text.raw_output},
                    {"role": "user", "content": text.observation},
                ]
                still.append(ep | {"n": n, "prompt": prompt + turn})
        live = still
        written += len(steps)
        yield IterationBatch(started=started, steps=steps, finished=finished)


def _measure(
    path: Path, batch: int, system_chars: int | None, group_seconds: float
) -> tuple[float, float, float]:
    """(step rows per second of sink.write, per CPU second of it, mean prompt characters).

    On a shared machine the wall clock counts the time spent waiting for a core; this
    process's CPU time does not.
    """
    store = Store(str(path))
    run_id = store.create_run(
        RunSpec(name="bench", policy="oracle", dataset="demo", questions_path="q", db_dir="d"),
        episodes_planned=STEPS,
    )
    sink = store.sink(run_id, group_seconds=group_seconds)
    rows, seconds, cpu, chars = 0, 0.0, 0.0, 0
    for it in iterations(batch, system_chars, STEPS):
        start, start_cpu = time.perf_counter(), time.process_time()
        sink.write(it)
        seconds += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        rows += len(it.steps)
        chars += sum(len(m["content"]) for s in it.steps for m in s.prompt)
    start, start_cpu = time.perf_counter(), time.process_time()
    sink.flush()  # the last held batches count too
    seconds += time.perf_counter() - start
    cpu += time.process_time() - start_cpu
    store.close()
    return rows / seconds, rows / cpu, chars / rows


def machine_reference() -> float:
    """Rows a second of a fixed write no code of ours takes part in: 100,000 rows of ~350
    characters, one index, into an in-memory SQLite database (best of 3). This shared machine's
    speed moves by 15% from hour to hour: printed beside the figures, it tells a slower hour
    from a slower sink."""
    rows = [(i % 977, i, "x" * (300 + i % 100)) for i in range(100_000)]
    best = 0.0
    for _ in range(3):
        with closing(sqlite3.connect(":memory:")) as conn:
            conn.execute("CREATE TABLE t (a INTEGER, b INTEGER, c TEXT)")
            conn.execute("CREATE UNIQUE INDEX t_ab ON t (a, b)")
            start = time.perf_counter()
            conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
            conn.commit()
            best = max(best, len(rows) / (time.perf_counter() - start))
    return best


def test_sink_write_throughput(tmp_path: Path) -> None:
    print(f"\nsink.write into SQLite, {STEPS} steps per run, median of {REPEAT} "
          f"(target {TARGET:,} rows/s); load average {os.getloadavg()[0]:.1f}; "
          f"machine reference {machine_reference():,.0f} rows/s")  # fmt: skip
    print(
        f"{'mode':>14} {'batch':>6} {'system':>7} {'prompt chars':>13} {'rows/s':>9} "
        f"{'rows/cpu-s':>11}  runs"
    )
    for mode, group_seconds in MODES:
        for batch, system_chars in CASES:
            wall, cpu = [], []
            for i in range(REPEAT):
                path = tmp_path / f"{batch}-{system_chars}-{group_seconds}-{i}.db"
                rate, cpu_rate, mean_chars = _measure(path, batch, system_chars, group_seconds)
                wall.append(rate)
                cpu.append(cpu_rate)
            flag = "" if statistics.median(wall) >= TARGET else "  SLOW"
            runs = " ".join(f"{r:,.0f}" for r in wall)
            rates = f"{statistics.median(wall):>9,.0f} {statistics.median(cpu):>11,.0f}"
            print(
                f"{mode:>14} {batch:>6} {system_chars or 'runner':>7} {mean_chars:>13,.0f} "
                f"{rates}  {runs}{flag}"
            )
