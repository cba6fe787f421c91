"""The oracle end to end through environment, parser and grader, on real benchmarks."""

from __future__ import annotations

from pathlib import Path

from rollout_core.datasets import load_dataset, load_named_dataset
from rollout_core.policies.registry import make_policy
from rollout_core.records import ListSink
from rollout_core.runner import plan_episodes, run_episodes


def test_oracle_on_demo_benchmark_is_perfect() -> None:
    ds = load_named_dataset("demo")
    sink = ListSink()
    tasks = plan_episodes(ds.questions, samples=1, run_seed=0)
    stats = run_episodes(ds, tasks, make_policy("oracle"), sink, batch_size=32)
    misses = [e.question_id for e in sink.episodes if e.outcome != "correct"]
    assert stats.episodes == len(ds.questions) >= 80
    assert misses == []


def test_oracle_on_spider_dev_scores_at_least_99_percent(spider: Path) -> None:
    ds = load_dataset(spider / "questions.json", spider / "database")
    assert len(ds.questions) == 972
    sink = ListSink()
    tasks = plan_episodes(ds.questions, samples=1, run_seed=0)
    stats = run_episodes(ds, tasks, make_policy("oracle"), sink, batch_size=64)
    misses = sorted(e.question_id for e in sink.episodes if e.outcome != "correct")
    assert stats.episodes == 972
    assert stats.accuracy >= 0.99, f"oracle misses: {misses}"
    # every miss is listed so a change in the grader shows up as a diff, not a silent drop
    assert len(misses) <= 9, misses
