"""A TRL tool-calling trainer whose scores rollscope records, and the check that the store
holds them as TRL's own completions files do: the in-process tool environment's and the
environment server's tests share both."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store

GROUP = 2
"""Samples of a question in a batch; each batch has two questions."""
STEPS = 2
"""Optimizer steps trained, a batch each."""


def spread_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A reward that differs between samples, so that groups have advantages to record."""
    return [sum(ids) % 10 / 10.0 for ids in completion_ids]


def failing_at_call(call: int) -> Callable[..., list[float]]:
    """`spread_reward`, raising RuntimeError("node lost") at its `call`-th call: a trainer
    that crashes in that step, its rollouts played."""
    calls = 0

    def reward(**kw: Any) -> list[float]:
        nonlocal calls
        calls += 1
        if calls == call:
            raise RuntimeError("node lost")
        return spread_reward(**kw)

    return reward


def tool_trainer(
    tiny_checkpoint: Path,
    out: Path,
    rows: Any,
    environment_factory: Any,
    reward: Any = None,
    eval_rows: Any = None,
    **args: Any,
) -> Any:
    """A GRPOTrainer on the tiny model with a chat template that renders tool calls (Qwen2.5's),
    `STEPS` steps of `GROUP` samples of two questions, writing its completions files (`args`:
    other GRPOConfig values)."""
    import os

    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from app.trl import checkpointing_off

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja").read_text()
    return GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=tok,
        reward_funcs=[reward or spread_reward],
        args=GRPOConfig(
            output_dir=str(out),
            per_device_train_batch_size=GROUP * 2,
            num_generations=GROUP,
            max_completion_length=8,
            learning_rate=5e-2,
            use_cpu=True,
            bf16=False,
            **checkpointing_off(GRPOConfig),
            report_to=[],
            logging_steps=1,
            log_completions=True,
            **{"max_steps": STEPS, "save_strategy": "no", "disable_tqdm": True, **args},
        ),
        train_dataset=rows,
        eval_dataset=eval_rows,
        environment_factory=environment_factory,
    )


def played(store_file: Path, run_id: int) -> list[tuple[int, int, str, float | None]]:
    """The run's episodes by id: id, training step, question, trainer's advantage."""
    with closing(sqlite3.connect(store_file)) as db:
        return db.execute(
            "SELECT id, train_step, question, trainer_advantage FROM episodes "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()


def assert_scored_as_logged(
    store: Store, store_file: Path, run_id: int, out: Path, environment_reward: str
) -> None:
    """Each episode's advantage and rewards by name are its row's in TRL's completions files
    (the environments reset in the batch's order, so a step's episodes, by id, are the
    file's rows), and some advantage is not zero."""
    import pyarrow.parquet as pq

    episodes = played(store_file, run_id)
    assert len(episodes) == STEPS * GROUP * 2
    advantages = []
    for step in range(STEPS):
        path = out / "completions" / f"completions_{step + 1:05d}.parquet"
        logged = pq.read_table(path).to_pylist()
        mine = [(i, q, a) for i, s, q, a in episodes if s == step]
        assert len(mine) == len(logged)
        origins = store.episode_origins([i for i, _, _ in mine])
        for (episode_id, question, advantage), row in zip(mine, logged, strict=True):
            assert question in row["prompt"][-1]["content"]
            assert advantage == pytest.approx(row["advantage"], abs=1e-6)
            advantages.append(advantage)
            assert dict(origins[episode_id].rewards) == {
                "spread_reward": pytest.approx(row["spread_reward"], abs=1e-6),
                environment_reward: pytest.approx(row[environment_reward], abs=1e-6),
            }
    assert any(abs(a) > 1e-3 for a in advantages)
