"""A trainer's evaluation rollouts (`eval_strategy`) go to a run of their own, each episode at
the step it evaluated, so the training run's curves count training alone and the evaluation's
steps are its checkpoints side by side; a resumed trainer replaces the evaluations it plays
again and keeps the one it saved its checkpoint after."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.batch import JobError
from app.training.rollout import RolloutFunction
from app.trl import checkpointing_off, make_rollout_func, training_dataset
from rollout_core.datasets import DatasetError
from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from storage.read_models import EpisodeFilter
from storage.store import Store
from storage.training import played_again, training_steps
from tests.support.benchmark import held_out, make_benchmark
from tests.support.tool_scores import failing_at_call, spread_reward

pytestmark = pytest.mark.slow

GROUP = 2
TRAINED = ["q-count", "q-france"]
EVALUATED = ["q-avg", "q-join"]


def _split(root: Path) -> None:
    """The benchmark, and a questions file of the questions it evaluates on (apart from the
    ones it trains on) over the same databases."""
    questions, _ = make_benchmark(root)
    held_out(questions, EVALUATED, root / "eval.json")


def _rollout(
    root: Path, store: Store, name: str, *, resume: bool = False, evaluated: bool = True
) -> RolloutFunction:
    """The rollout function, told of the evaluation's questions unless `evaluated` is False."""
    questions, db_dir = root / "questions.json", root / "database"
    eval_set = {"eval_questions": str(root / "eval.json"), "eval_db_dir": str(db_dir)}
    return make_rollout_func(
        questions=str(questions), db_dir=str(db_dir), question_ids=TRAINED, store=store,
        name=name, step_budget=1, max_new_tokens=4, resume=resume,
        **(eval_set if evaluated else {}),
    )  # fmt: skip


def _train(
    tiny_checkpoint: Path,
    root: Path,
    rollout: RolloutFunction,
    reward: Any,
    *,
    max_steps: int,
    checkpoint: str | None = None,
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir = str(root / "questions.json"), str(root / "database")
    args = GRPOConfig(
        output_dir=str(root / "out"),
        per_device_train_batch_size=GROUP * len(TRAINED),
        per_device_eval_batch_size=GROUP * len(EVALUATED),
        num_generations=GROUP,
        num_generations_eval=GROUP,
        max_steps=max_steps,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        learning_rate=5e-2,
        use_cpu=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        report_to=[],
        logging_steps=1,
        beta=0.0,
        seed=1,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=AutoTokenizer.from_pretrained(tiny_checkpoint),
        reward_funcs=[reward],
        args=args,
        train_dataset=training_dataset(
            questions=questions, db_dir=db_dir, question_ids=TRAINED, step_budget=1
        ),
        eval_dataset=training_dataset(
            questions=str(root / "eval.json"), db_dir=db_dir, step_budget=1
        ),
        rollout_func=rollout,
    )
    with rollout.recording():
        trainer.train(resume_from_checkpoint=checkpoint)


def _played(store: Store, run_id: int) -> dict[int, tuple[int | None, str]]:
    """Each episode of a run: its training step and question."""
    found = store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=500).items
    return {e.id: (e.train_step, e.question_id) for e in found}


def test_evaluation_rollouts_are_a_run_of_their_own_at_the_step_evaluated(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    _split(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    rollout = _rollout(tmp_path, store, "evaluated")
    _train(tiny_checkpoint, tmp_path, rollout, spread_reward, max_steps=2)
    assert rollout.run_id is not None and rollout.eval_run_id is not None
    per_step = GROUP * len(TRAINED)

    trained = _played(store, rollout.run_id)
    assert {q for _, q in trained.values()} == set(TRAINED)
    assert [(s.train_step, s.episodes) for s in training_steps(store, rollout.run_id)] == [
        (0, per_step), (1, per_step)
    ]  # fmt: skip

    run = store.get_run(rollout.eval_run_id)
    assert run is not None
    assert (run.name, run.kind, run.status) == ("evaluated-eval", "training", "completed")
    spec = RunSpec.from_stored(run.spec)
    assert spec.evaluation_of == "evaluated"
    assert spec.samples == spec.training.num_generations == GROUP
    assert spec.questions_path == str(tmp_path / "eval.json")
    evaluated = _played(store, rollout.eval_run_id)
    assert {q for _, q in evaluated.values()} == set(EVALUATED)
    # Evaluated after optimizer steps 1 and 2: each evaluation at the step of its weights.
    assert [(s.train_step, s.episodes) for s in training_steps(store, rollout.eval_run_id)] == [
        (1, GROUP * len(EVALUATED)), (2, GROUP * len(EVALUATED))
    ]  # fmt: skip
    # The trainer's scores of the evaluation batches are on their episodes.
    details = [store.get_episode(i) for i in evaluated]
    assert all(d is not None and d.trainer_advantage is not None for d in details)
    store.close()


def test_a_resumed_trainer_replaces_the_evaluations_it_plays_again(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # The reward's calls: step 0, evaluation at 1, step 1, evaluation at 2, step 2 (crashes).
    # Checkpoint 1 was saved after the evaluation at 1, so the resumed trainer keeps that one
    # and evaluates at 2 and 3.
    _split(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    first = _rollout(tmp_path, store, "resumed")
    with pytest.raises(RuntimeError, match="node lost"):
        _train(tiny_checkpoint, tmp_path, first, failing_at_call(5), max_steps=3)
    assert first.eval_run_id is not None
    eval_run = store.get_run(first.eval_run_id)
    assert eval_run is not None and eval_run.status == "failed"
    first_play = _played(store, first.eval_run_id)
    assert sorted({step for step, _ in first_play.values()}) == [1, 2]

    resumed = _rollout(tmp_path, store, "resumed", resume=True)
    checkpoint = str(tmp_path / "out" / "checkpoint-1")
    _train(tiny_checkpoint, tmp_path, resumed, spread_reward, max_steps=3, checkpoint=checkpoint)
    assert resumed.eval_run_id == first.eval_run_id
    eval_run = store.get_run(first.eval_run_id)
    assert eval_run is not None and eval_run.status == "completed"
    drawn = GROUP * len(EVALUATED)
    steps = training_steps(store, first.eval_run_id)
    assert [(s.train_step, s.episodes) for s in steps] == [(1, drawn), (2, drawn), (3, drawn)]
    assert played_again(store, first.eval_run_id).by_step == {2: drawn}
    every = list(_played(store, first.eval_run_id))
    assert store.replaced_among(every) == {i for i, (s, _) in first_play.items() if s == 2}
    store.close()


def test_the_evaluations_name_and_questions_are_checked_before_training(tmp_path: Path) -> None:
    _split(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    spec = RunSpec(name="taken-eval", policy="oracle", dataset="demo", questions_path="", db_dir="")
    store.create_run(spec, episodes_planned=None)
    with pytest.raises(JobError, match=r"'taken-eval' already exists.*eval_name="):
        _rollout(tmp_path, store, "taken")
    with pytest.raises(JobError, match="a name of its own"):
        make_rollout_func(dataset="demo:train", store=store, name="same", eval_name="same")
    with pytest.raises(SpecError, match="eval_db_dir goes with eval_questions"):
        make_rollout_func(
            dataset="demo:train", store=store, name="x", eval_db_dir=str(tmp_path / "database")
        )
    with pytest.raises(SpecError, match="evaluation run's name is empty"):
        make_rollout_func(dataset="demo:train", store=store, name="x", eval_name="  ")
    with pytest.raises(DatasetError, match=r"^the evaluation's questions: dataset not found"):
        make_rollout_func(dataset="demo:train", store=store, name="x", eval_dataset="nope:x")
    assert [r.name for r in store.list_runs()] == ["taken-eval"]
    store.close()


def test_an_eval_set_of_other_questions_is_refused_at_the_first_rollout(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # Not told of the evaluation's questions, the rollout function found no question for
    # its prompts at the first evaluation; it says so before the trainer trains a step.
    _split(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    rollout = _rollout(tmp_path, store, "unknown-eval", evaluated=False)
    with pytest.raises(ValueError, match="matches no question of this rollout function's evalu"):
        _train(tiny_checkpoint, tmp_path, rollout, spread_reward, max_steps=2)
    assert store.list_runs() == []  # nothing recorded, nothing to clean up
    assert not (tmp_path / "out" / "checkpoint-1").exists()  # no step trained
    store.close()
