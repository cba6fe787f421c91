"""A training run's groups without a number (an environment server's episodes carry a training
step and no group; a Recorder's episodes given no step): a group is its question's samples at
one step, as the overview lists it, never the question's samples pooled over the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.recorder import Recorder
from rollout_core import grpo
from rollout_core.records import IterationBatch
from storage.read_models import GroupKey
from storage.store import Store
from tests.support.records import finish, spec, start, step
from tests.support.stores import write_run

# training step -> rewards of question q1's samples at it
_STEPS = {0: [1.0, 1.0], 1: [0.0, 0.0], 2: [1.0, 0.0]}


def served_episode(q: str, sample: int, reward: float, train_step: int | None) -> IterationBatch:
    """One finished episode as the environment server writes it: a training step, no group."""
    return IterationBatch(
        started=[start(q, sample, train_step=train_step)],
        steps=[step(q, sample, 1, action="ANSWER", done=True, reward=reward)],
        finished=[finish(q, sample, "correct" if reward >= 1.0 else "wrong", reward, 1)],
    )


def served_run(store: Store) -> int:
    """An environment server's run: q1 played twice at each of three training steps."""
    samples = [(s, r) for s, rewards in _STEPS.items() for r in rewards]
    batches = [served_episode("q1", i, r, s) for i, (s, r) in enumerate(samples)]
    return write_run(store, spec("served", kind="env"), batches)


def test_a_group_without_a_number_is_its_questions_samples_at_its_step(store: Store) -> None:
    run_id = served_run(store)
    listed = store.group_overview(run_id).groups
    assert sorted(g.key.train_step or 0 for g in listed) == [0, 1, 2]
    for stats in listed:
        rewards = _STEPS[stats.key.train_step or 0]
        assert stats.size == len(rewards)
        # The group the overview lists opens as that group: before, every step's samples.
        assert store.group_size(run_id, stats.key) == stats.size
        found = store.get_group(run_id, stats.key)
        assert found is not None
        assert found.stats.key == stats.key
        assert [m.detail.summary.train_step for m in found.members] == [stats.key.train_step] * 2
        assert [m.detail.summary.reward for m in found.members] == rewards
        assert found.stats.std == pytest.approx(grpo.group_std(rewards))
        assert found.stats.mean == pytest.approx(stats.mean)
    assert store.get_group(run_id, GroupKey("q1", None, 7)) is None
    assert store.groups_by_step(run_id)


def test_a_training_runs_samples_without_a_step_are_a_group_of_their_own(tmp_path: Path) -> None:
    url = str(tmp_path / "store.db")
    turns = [{"role": "assistant", "content": "ANSWER 6"}]
    with Recorder(url, run="mixed", kind="training") as rec:
        for reward, at in ((1.0, None), (0.0, None), (0.0, None), (1.0, 3), (1.0, 3)):
            rec.episode(question="How many singers?", turns=turns, reward=reward, step=at)
    store = Store(url, read_only=True)
    (run,) = store.list_runs()
    by_step = {g.key.train_step: g for g in store.group_overview(run.id).groups}
    assert {k: g.size for k, g in by_step.items()} == {None: 3, 3: 2}
    stepless = by_step[None].key
    assert store.group_size(run.id, stepless) == 3
    found = store.get_group(run.id, stepless)
    assert found is not None
    assert [m.detail.summary.reward for m in found.members] == [1.0, 0.0, 0.0]
    assert {m.detail.summary.train_step for m in found.members} == {None}
    # The step's group is numbered: found by its number, as before.
    numbered = by_step[3].key
    assert numbered.group_index is not None
    assert store.group_size(run.id, numbered) == 2


def test_a_batch_runs_group_is_still_its_questions_samples(store: Store) -> None:
    batches = [served_episode("q1", i, r, None) for i, r in enumerate([1.0, 0.0, 0.0])]
    run_id = write_run(store, spec("batch", samples=3), batches)
    found = store.get_group(run_id, GroupKey("q1"))
    assert found is not None and found.stats.size == store.group_size(run_id, GroupKey("q1")) == 3
