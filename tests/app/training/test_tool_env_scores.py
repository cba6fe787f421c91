"""The trainer's scores of a tool-calling run (`GRPOTrainer(environment_factory=...)`): given
the trainer, the factory's callback records each batch's advantages and reward functions'
values on the episodes its environments played, as TRL's own completions files hold them
(`_log_completions` writes `trainer._logs`, which `app.training.trainer_scores` reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.trl import make_environment_factory, training_dataset
from storage.store import Store
from tests.support.benchmark import make_benchmark
from tests.support.tool_scores import GROUP, STEPS, assert_scored_as_logged, played, tool_trainer

pytestmark = pytest.mark.slow


def _trained(tiny_checkpoint: Path, tmp_path: Path, name: str, *, with_trainer: bool) -> Any:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    factory = make_environment_factory(
        dataset=None, questions=str(questions), db_dir=str(db_dir), store=store, name=name,
        step_budget=2,
    )  # fmt: skip
    rows = training_dataset(None, questions=str(questions), db_dir=str(db_dir), tools=True)
    trainer = tool_trainer(tiny_checkpoint, tmp_path / "out", rows, factory)
    trainer.add_callback(factory.callback(trainer) if with_trainer else factory.callback())
    trainer.train()
    assert factory.run.run_id is not None
    return store, factory.run.run_id


def test_each_batch_is_scored_as_the_trainers_completions_files_hold_it(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    store, run_id = _trained(tiny_checkpoint, tmp_path, "tools-scored", with_trainer=True)
    assert_scored_as_logged(
        store, tmp_path / "store.db", run_id, tmp_path / "out", "SQLToolEnvironment"
    )
    # The episode's own reward stays the environment's.
    for episode_id, *_ in played(tmp_path / "store.db", run_id):
        origin = store.episode_origins([episode_id])[episode_id]
        episode = store.get_episode(episode_id)
        assert episode is not None
        assert episode.summary.reward == pytest.approx(origin.rewards["SQLToolEnvironment"])


def test_without_the_trainer_nothing_of_its_scores_is_recorded(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    _, run_id = _trained(tiny_checkpoint, tmp_path, "tools-unscored", with_trainer=False)
    advantages = [a for *_, a in played(tmp_path / "store.db", run_id)]
    assert advantages == [None] * (STEPS * GROUP * 2)
