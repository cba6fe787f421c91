"""A tool-calling run (`GRPOTrainer(environment_factory=...)`) resumed from a checkpoint: the
trainer plays the steps after it again, and the run reads each step as its latest play."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.trl import make_environment_factory, training_dataset
from storage.store import Store
from storage.training import played_again, training_steps
from tests.support.benchmark import make_benchmark
from tests.support.tool_scores import GROUP, failing_at_call, spread_reward, tool_trainer

pytestmark = pytest.mark.slow


def test_a_resumed_tool_run_reads_each_step_as_its_latest_play(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    rows = training_dataset(None, questions=str(questions), db_dir=str(db_dir), tools=True)
    out = tmp_path / "out"

    def train(reward: Any, resume: bool, checkpoint: str | None) -> int:
        factory = make_environment_factory(
            dataset=None, questions=str(questions), db_dir=str(db_dir), store=store,
            name="tools-resumed", step_budget=2, resume=resume,
        )  # fmt: skip
        trainer = tool_trainer(
            tiny_checkpoint, out, rows, factory, reward, max_steps=3, save_strategy="steps",
            save_steps=1,
        )  # fmt: skip
        trainer.add_callback(factory.callback(trainer))
        with factory.run.recording():
            trainer.train(resume_from_checkpoint=checkpoint)
        assert factory.run.run_id is not None
        return factory.run.run_id

    with pytest.raises(RuntimeError, match="node lost"):
        train(failing_at_call(3), False, None)
    run_id = train(spread_reward, True, str(out / "checkpoint-1"))
    drawn = GROUP * 2
    assert [(s.train_step, s.episodes) for s in training_steps(store, run_id)] == [
        (0, drawn), (1, drawn), (2, drawn)
    ]  # fmt: skip
    # Step 2's sessions were open when the reward function failed: unfinished, they were
    # dropped as the run was taken up again; step 1's finished play is kept, replaced.
    assert played_again(store, run_id).by_step == {1: drawn}
    store.close()
