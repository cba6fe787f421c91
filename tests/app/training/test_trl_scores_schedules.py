"""The trainer's scores of recorded rollouts under TRL schedules other than one generation a
step: a generation batch that serves two optimizer steps, and evaluation between them, whose
batches the trainer scores in between (`app.training.trainer_scores`). Each batch's scores
are in the store when the step or evaluation that played it ends, in the run it went to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.trl import checkpointing_off, make_rollout_func, shaped_reward, training_dataset
from rollout_core import grpo
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.benchmark import make_benchmark

pytestmark = pytest.mark.slow

GROUP = 2


def _spread_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A reward that differs between samples, so that groups have advantages to record."""
    return [len(set(ids)) / 100.0 for ids in completion_ids]


def test_scores_pair_with_their_batches_across_steps_and_evaluation(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    rollout = make_rollout_func(
        dataset=None, questions=str(questions), db_dir=str(db_dir), store=store,
        name="grpo-schedules", step_budget=2, max_new_tokens=8, batch_size=8,
    )  # fmt: skip
    data = training_dataset(None, questions=str(questions), db_dir=str(db_dir), step_budget=2)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=GROUP * 2,
        per_device_eval_batch_size=GROUP * 2,
        num_generations=GROUP,
        num_generations_eval=GROUP,
        steps_per_generation=2,  # one rollout call serves two optimizer steps
        max_steps=4,
        eval_strategy="steps",
        eval_steps=2,
        learning_rate=5e-2,
        use_cpu=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        beta=0.0,
        seed=1,
        disable_tqdm=True,
        log_completions=True,
    )
    calls: list[dict[str, list[Any]]] = []
    scored_before_next_call: list[bool] = []

    def watched(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if calls:  # the last batch's scores, as the store holds them before this call
            earlier = [store.get_episode(i) for i in calls[-1]["ids"]]
            scored = all(d is not None and d.trainer_advantage is not None for d in earlier)
            scored_before_next_call.append(scored)
        out = rollout(prompts, trainer)
        calls.append({"ids": out["episode_id"], "training": [trainer.model.training]})
        return out

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=AutoTokenizer.from_pretrained(tiny_checkpoint),
        reward_funcs=[shaped_reward, _spread_reward],
        args=args,
        train_dataset=data,
        eval_dataset=data.select(range(GROUP)),
        rollout_func=watched,
    )
    try:
        with rollout.recording():
            trainer.train()
        assert rollout.run_id is not None
        modes = [c["training"][0] for c in calls]
        assert True in modes and False in modes  # training and evaluation batches both
        # Each batch was recorded when the optimizer step or evaluation that played it ended,
        # not only once the trainer asked for the next one (a live run's newest step).
        assert scored_before_next_call == [True] * (len(calls) - 1)
        # Training rollouts in the training run, the evaluation's in a run of its own.
        for run_id, training in ((rollout.run_id, True), (rollout.eval_run_id, False)):
            assert run_id is not None
            episodes = store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=500)
            mine = [i for c in calls if c["training"][0] is training for i in c["ids"]]
            assert {e.id for e in episodes.items} == set(mine)
        played = {i for c in calls for i in c["ids"]}
        origins = store.episode_origins(sorted(played))
        for call in calls:
            ids = call["ids"]
            details = [store.get_episode(i) for i in ids]
            advantages = [d.trainer_advantage for d in details if d is not None]
            # Every episode of every batch, the last one's included, has the trainer's scores.
            assert len(advantages) == len(ids) and None not in advantages
            named = [origins[i].rewards for i in ids]
            assert all(set(r) == {"shaped_reward", "_spread_reward"} for r in named)
            # Each row paired with its own episode: shaped_reward is the environment's reward.
            rewards = [d.summary.reward for d in details if d is not None]
            assert [r["shaped_reward"] for r in named] == pytest.approx(rewards, abs=1e-6)
            # As TRL computes them from those rewards: each group's advantages sum to 0, and
            # follow the sum of the two rewards within the group.
            for start in range(0, len(ids), GROUP):
                group = advantages[start : start + GROUP]
                totals = [sum(named[start + k].values()) for k in range(GROUP)]
                assert sum(group) == pytest.approx(0.0, abs=1e-4)
                expected = grpo.advantages(totals)
                assert group == pytest.approx(expected, abs=1e-3)
    finally:
        store.close()
