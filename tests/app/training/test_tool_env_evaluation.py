"""A tool-calling trainer's evaluation (`GRPOTrainer(environment_factory=...)` with
`eval_strategy`): its rollouts record into a run of their own, of the evaluation's questions,
each at the step it evaluated; the training run holds training alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.trl import make_environment_factory, training_dataset
from rollout_core.records import RunSpec
from storage.store import Store
from storage.training import training_steps
from tests.support.benchmark import QUESTIONS, held_out, make_benchmark
from tests.support.tool_scores import GROUP, played, tool_trainer

pytestmark = pytest.mark.slow

TRAINED = ["q-count", "q-france"]
EVALUATED = ["q-avg", "q-join"]


def _evaluating_trainer(
    tiny_checkpoint: Path, tmp_path: Path, factory: Any, rows: Any, eval_file: Path, db_dir: Path
) -> Any:
    """A tool-calling trainer on `rows` that evaluates on `eval_file`'s questions after each
    step, the factory's callback added."""
    eval_rows = training_dataset(questions=str(eval_file), db_dir=str(db_dir), tools=True)
    trainer = tool_trainer(
        tiny_checkpoint, tmp_path / "out", rows, factory, eval_rows=eval_rows,
        eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=GROUP * 2,
        num_generations_eval=GROUP,
    )  # fmt: skip
    trainer.add_callback(factory.callback(trainer))
    return trainer


def test_evaluation_tool_calls_are_a_run_of_their_own_at_the_step_evaluated(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    eval_file = held_out(questions, EVALUATED, tmp_path / "eval.json")
    store_file = tmp_path / "store.db"
    store = Store(f"sqlite:///{store_file}")
    factory = make_environment_factory(
        questions=str(questions), db_dir=str(db_dir), store=store, name="tools",
        step_budget=2, eval_questions=str(eval_file), eval_db_dir=str(db_dir),
    )  # fmt: skip
    rows = training_dataset(
        questions=str(questions), db_dir=str(db_dir), question_ids=TRAINED, tools=True
    )
    trainer = _evaluating_trainer(tiny_checkpoint, tmp_path, factory, rows, eval_file, db_dir)
    with factory.run.recording():
        trainer.train()
    training, evaluation = factory.run, factory.run.evaluation
    assert evaluation is not None
    assert training.run_id is not None and evaluation.run_id is not None

    trained = played(store_file, training.run_id)
    assert {q for *_, q, _ in trained} == _texts(TRAINED)
    drawn = GROUP * 2
    assert [(s.train_step, s.episodes) for s in training_steps(store, training.run_id)] == [
        (0, drawn), (1, drawn)
    ]  # fmt: skip

    run = store.get_run(evaluation.run_id)
    assert run is not None and (run.name, run.status) == ("tools-eval", "completed")
    spec = RunSpec.from_stored(run.spec)
    assert spec.evaluation_of == "tools"
    assert spec.questions_path == str(eval_file)
    evaluated = played(store_file, evaluation.run_id)
    assert {q for *_, q, _ in evaluated} == _texts(EVALUATED)
    # After optimizer steps 1 and 2, each evaluation at the step of the weights it played.
    assert [(s.train_step, s.episodes) for s in training_steps(store, evaluation.run_id)] == [
        (1, drawn), (2, drawn)
    ]  # fmt: skip
    # The trainer scored its evaluation batches: their advantages are on their episodes.
    assert None not in [advantage for *_, advantage in evaluated]
    store.close()


def _texts(ids: list[str]) -> set[str]:
    return {text for i, text, _ in QUESTIONS if i in ids}


def test_an_eval_set_of_other_questions_is_refused_before_a_step(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # Not told of the evaluation's questions, the environments failed at the first
    # evaluation's reset; the callback says so as the trainer begins.
    questions, db_dir = make_benchmark(tmp_path / "bench")
    train_file = held_out(questions, TRAINED, tmp_path / "train.json")
    eval_file = held_out(questions, EVALUATED, tmp_path / "eval.json")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    factory = make_environment_factory(
        questions=str(train_file), db_dir=str(db_dir), store=store, name="tools", step_budget=2
    )
    rows = training_dataset(questions=str(train_file), db_dir=str(db_dir), tools=True)
    trainer = _evaluating_trainer(tiny_checkpoint, tmp_path, factory, rows, eval_file, db_dir)
    with pytest.raises(ValueError, match="the trainer's eval set asks question 'q-avg', which"):
        trainer.train()
    assert store.list_runs() == []
    store.close()
