"""The trainer's scores of a tool-calling run (`GRPOTrainer(environment_factory=...)`): given
the trainer, the factory's callback records each batch's advantages and reward functions'
values on the episodes its environments played, as TRL's own completions files hold them
(`_log_completions` writes `trainer._logs`, which `app.training.trainer_scores` reads)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.trl import checkpointing_off, make_environment_factory, training_dataset
from storage.store import Store
from tests.support.benchmark import make_benchmark

pytestmark = pytest.mark.slow

GROUP = 2
STEPS = 2


def _spread_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A reward that differs between samples, so that groups have advantages to record."""
    return [sum(ids) % 10 / 10.0 for ids in completion_ids]


def _trainer(tiny_checkpoint: Path, tmp_path: Path, store: Store, name: str) -> Any:
    import trl
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir = make_benchmark(tmp_path / "bench")
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja").read_text()
    factory = make_environment_factory(
        dataset=None, questions=str(questions), db_dir=str(db_dir), store=store, name=name,
        step_budget=2,
    )  # fmt: skip
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=GROUP * 2,
        num_generations=GROUP,
        max_steps=STEPS,
        max_completion_length=8,
        learning_rate=5e-2,
        use_cpu=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        report_to=[],
        logging_steps=1,
        log_completions=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=tok,
        reward_funcs=[_spread_reward],
        args=args,
        train_dataset=training_dataset(
            None, questions=str(questions), db_dir=str(db_dir), tools=True
        ),
        environment_factory=factory,
    )
    return factory, trainer


def test_each_batch_is_scored_as_the_trainers_completions_files_hold_it(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    factory, trainer = _trainer(tiny_checkpoint, tmp_path, store, "tools-scored")
    trainer.add_callback(factory.callback(trainer))
    trainer.train()
    run_id = factory.run.run_id
    assert run_id is not None
    with closing(sqlite3.connect(tmp_path / "store.db")) as db:
        rows = db.execute(
            "SELECT id, train_step, question FROM episodes WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()
    assert len(rows) == STEPS * GROUP * 2
    advantages = []
    for step in range(STEPS):
        path = tmp_path / "out" / "completions" / f"completions_{step + 1:05d}.parquet"
        logged = pq.read_table(path).to_pylist()
        # The environments reset in the batch's order, so the step's episodes, by id, are
        # the file's rows.
        played = [(i, q) for i, s, q in rows if s == step]
        assert len(played) == len(logged)
        origins = store.episode_origins([i for i, _ in played])
        for (episode_id, question), row in zip(played, logged, strict=True):
            assert question in row["prompt"][-1]["content"]
            episode = store.get_episode(episode_id)
            assert episode is not None and episode.trainer_advantage is not None
            assert episode.trainer_advantage == pytest.approx(row["advantage"], abs=1e-6)
            advantages.append(episode.trainer_advantage)
            assert dict(origins[episode_id].rewards) == {
                "_spread_reward": pytest.approx(row["_spread_reward"], abs=1e-6),
                "SQLToolEnvironment": pytest.approx(row["SQLToolEnvironment"], abs=1e-6),
            }
            # The episode's own reward stays the environment's.
            assert episode.summary.reward == pytest.approx(row["SQLToolEnvironment"], abs=1e-6)
    assert any(abs(a) > 1e-3 for a in advantages)


def test_without_the_trainer_nothing_of_its_scores_is_recorded(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    factory, trainer = _trainer(tiny_checkpoint, tmp_path, store, "tools-unscored")
    trainer.add_callback(factory.callback())
    trainer.train()
    assert factory.run.run_id is not None
    with closing(sqlite3.connect(tmp_path / "store.db")) as db:
        held = db.execute(
            "SELECT count(*), count(trainer_advantage) FROM episodes WHERE run_id = ?",
            (factory.run.run_id,),
        ).fetchone()
    assert held == (STEPS * GROUP * 2, 0)
