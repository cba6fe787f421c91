"""Speed of GRPO groups and Training on one long GRPO run: a demo-sized training run (16 steps,
2 questions a step, 4 samples a group, rewards mostly shaping noise) copied over later steps to
256k episodes, 64k groups, 32k training steps.

Run on request: `pytest tests/benchmarks/bench_training_scale.py --benchmarks -s`.
ROLLSCOPE_BENCH_TRAINING_COPIES (2,000) scales it down for a quick check of the benchmark.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from app.dashboard.training.curves import curves_of, named_reward_points
from app.dashboard.training.flips import flips_of
from rollout_core.records import IterationBatch, Outcome
from storage import training
from storage.store import Store
from tests.benchmarks.bench_analysis import _best_of, _paint, _report
from tests.benchmarks.bench_dashboard import PAINT_TARGET_S, QUERY_TARGET_S
from tests.browser.conftest import CHROMIUM, start_dashboard, stop
from tests.support.records import finish, spec, start, step
from tests.support.synthetic import copy_training_run

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(1800)]

COPIES = int(os.environ.get("ROLLSCOPE_BENCH_TRAINING_COPIES", "2000"))
STEPS, PROMPTS, SAMPLES, QUESTIONS = 16, 2, 4, 8


def _demo_like(store: Store) -> int:
    """A training run shaped like the demo's: one question in eight sometimes solved, the
    others wrong with rewards apart by penalties and progress, or all equal."""
    rng = random.Random(0)
    run_id = store.create_run(spec("grpo-long", kind="training"), episodes_planned=1)
    sink = store.sink(run_id)
    group = 0
    for n in range(STEPS):
        for q in rng.sample([f"q{i}" for i in range(QUESTIONS)], PROMPTS):
            starts, steps, ends = [], [], []
            for k in range(SAMPLES):
                sample = SAMPLES * (PROMPTS * n + group % PROMPTS) + k
                right = q == "q3" and rng.random() < 0.4
                reward = 1.0 if right else rng.choice([0.0, 0.0, -0.01, -0.02, 0.05])
                outcome: Outcome = "correct" if right else "wrong"
                at = {"train_step": n, "group_index": group}
                starts.append(dataclasses.replace(start(q, sample), **at))  # type: ignore[arg-type]
                steps.append(step(q, sample, 1, action="ANSWER", done=True))
                ends.append(finish(q, sample, outcome, reward, 1))
            sink.write(IterationBatch(started=starts))
            sink.write(IterationBatch(steps=steps, finished=ends))
            group += 1
    store.set_run_status(run_id, "completed")
    return run_id


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    url = str(tmp_path_factory.mktemp("bench-training") / "long.db")
    store = Store(url)
    run_id = _demo_like(store)
    copy_training_run(store, run_id, COPIES)
    _name_rewards(url, run_id)
    store.close()
    return url, run_id


def _name_rewards(url: str, run_id: int) -> None:
    """Two named rewards an episode, as a trainer's two reward functions give them: its
    correctness, and the rest of its reward."""
    with closing(sqlite3.connect(url)) as conn, conn:
        conn.execute(
            "INSERT INTO episode_rewards (episode_id, name, value) "
            "SELECT id, 'correct_reward', outcome = 'correct' FROM episodes WHERE run_id = ? "
            "UNION ALL SELECT id, 'shaping', reward - (outcome = 'correct') FROM episodes "
            "WHERE run_id = ?",
            (run_id, run_id),
        )


def _training_page(store: Store, run_id: int) -> object:
    """What the Training page reads and computes for its curves and flips (uncached)."""
    steps = training.training_steps(store, run_id)
    flips = flips_of(steps)
    curves = curves_of(steps)
    named = named_reward_points(curves, training.named_reward_steps(store, run_id))
    return (
        curves,
        named,
        flips.with_texts(training.question_texts(store, run_id, flips.question_ids)),
    )


def test_training_run_reads(long_run: tuple[str, int]) -> None:
    url, run_id = long_run
    store = Store(url, read_only=True)
    reads: dict[str, Callable[[], Any]] = {
        "groups: overview, counted by source": lambda: store.group_overview(run_id),
        "training: per-step sums and draws": lambda: training.training_steps(store, run_id),
        "training: rewards by name, per step": lambda: training.named_reward_steps(store, run_id),
        "training: curves and flips": lambda: _training_page(store, run_id),
    }
    rows = [(name, _best_of(fn)) for name, fn in reads.items()]
    store.close()
    _report(f"{COPIES * STEPS * PROMPTS:,}-group training run", rows, QUERY_TARGET_S, "ms")


def test_training_run_pages_paint(long_run: tuple[str, int], tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Chromium at {CHROMIUM}")
    url, run_id = long_run
    pages = {
        "GRPO groups of the run": (f"/groups?run={run_id}", "text=/Groups by reward variance/"),
        "Training of the run": (f"/training?run={run_id}", "text=/One question across training/"),
    }
    proc, base_url = start_dashboard(url, tmp_path / "dashboard.log")
    try:
        results = _paint(base_url, pages, "[data-testid='stDataFrame']")
    finally:
        stop(proc)
    _report("training run page", results, PAINT_TARGET_S, "s")
