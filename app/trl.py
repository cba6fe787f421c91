"""Train with TRL: rollouts played by rollscope inside `GRPOTrainer`, recorded as a training run.

    from app.trl import correct_reward, make_rollout_func, training_dataset
    rollout_func = make_rollout_func(dataset="demo:train", store="rollscope.db", name="grpo-1")
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          reward_funcs=[correct_reward], rollout_func=rollout_func,
                          train_dataset=training_dataset("demo:train"))
    with rollout_func.recording():
        trainer.train()

Every prompt is played as a multi-turn episode by the batched runner with the trainer's own
model (no copy of the weights), written to the store as it finishes (training step and GRPO
group on each episode), and handed back to the trainer as exactly the token ids the model saw
and wrote, with the sampled tokens' log-probabilities and a mask that keeps the environment's
tokens out of the loss. `SQLToolEnvironment` is the same environment as tools, for
`GRPOTrainer(environment_factory=...)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from app.training.rollout import RolloutFunction, opening_messages
from app.training.run import evaluation_name
from app.training.tool_env import SQLToolEnvironment, ToolEnvironmentFactory, tool_prompt
from rollout_core.datasets import Dataset, DatasetError, select_questions
from rollout_core.errors import SpecError
from rollout_core.records import Question, RunSpec
from rollout_core.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_STEP_BUDGET,
    EnvironmentSettings,
    GenerationSettings,
)
from rollout_core.specs import resolve_dataset
from storage.store import Store

__all__ = [
    "RolloutFunction",
    "SQLToolEnvironment",
    "ToolEnvironmentFactory",
    "checkpointing_off",
    "correct_reward",
    "make_environment_factory",
    "make_rollout_func",
    "shaped_reward",
    "training_dataset",
]

_TRAINER_OWNED = ("temperature", "top_p")
_ENVIRONMENT = {f.name for f in fields(EnvironmentSettings)} - {"step_budget"}
_GENERATION = {f.name for f in fields(GenerationSettings)} - {
    "max_new_tokens",
    "batch_size",
    "seed",
    "device",
    *_TRAINER_OWNED,
}


def checkpointing_off(config: type) -> dict[str, Any]:
    """`GRPOConfig` keywords that turn activation checkpointing off (TRL turns it on), under
    the name this transformers knows: the old one, `gradient_checkpointing`, warns on every
    run where the new one, `activation_checkpointing`, exists."""
    known = getattr(config, "__dataclass_fields__", {})
    name = (
        "activation_checkpointing"
        if "activation_checkpointing" in known
        else "gradient_checkpointing"
    )
    return {name: False}


def training_dataset(
    dataset: str | None = None,
    *,
    questions: str | None = None,
    db_dir: str | None = None,
    question_ids: Sequence[str] | None = None,
    limit: int | None = None,
    step_budget: int = DEFAULT_STEP_BUDGET,
    tools: bool = False,
) -> Any:
    """A `datasets.Dataset` with the chat messages each question's episode opens with
    (`prompt`) and its `question_id`: the trainer's `train_dataset`.

    `dataset` takes the names `rollscope run --dataset` takes (`demo:train`, `demo:test`, a
    questions file); `questions` (+ `db_dir`) a Spider/BIRD layout instead. `tools=True` makes
    the prompts for `SQLToolEnvironment` (the question alone; its `reset` adds the tables).
    """
    import datasets

    ds, chosen = _questions(dataset, questions, db_dir, question_ids, limit)
    environment = EnvironmentSettings(step_budget=step_budget)
    if tools:
        prompts = [[{"role": "user", "content": tool_prompt(q)}] for q in chosen]
    else:
        prompts = opening_messages(ds, chosen, environment)
    return datasets.Dataset.from_dict({"prompt": prompts, "question_id": [q.id for q in chosen]})


def make_rollout_func(
    *,
    dataset: str | None = None,
    store: str | Store = "sqlite:///rollscope.db",
    name: str,
    questions: str | None = None,
    db_dir: str | None = None,
    question_ids: Sequence[str] | None = None,
    limit: int | None = None,
    step_budget: int = DEFAULT_STEP_BUDGET,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = 0,
    resume: bool = False,
    eval_dataset: str | None = None,
    eval_questions: str | None = None,
    eval_db_dir: str | None = None,
    eval_name: str | None = None,
    **settings: Any,
) -> RolloutFunction:
    """The function to pass as `GRPOTrainer(rollout_func=...)`, recording into run `name`.

    `settings` are the other environment settings (`sample_rows`, `max_observation_tokens`,
    `sandbox`) and `threads`; temperature and top_p are the trainer's (`GRPOConfig`), since it
    scores the tokens with its own. `resume=True` continues a training run of that name that
    was stopped (its episodes stay; numbering goes on). The trainer's evaluation rollouts
    (`eval_strategy`) record into run `eval_name` (default `{name}-eval`), each with the step
    it evaluated; `eval_dataset` (or `eval_questions` + `eval_db_dir`) names the questions of
    the trainer's `eval_dataset`, as `training_dataset` takes them, where they are not the
    training's. Bad input fails here, in one line, before the trainer is built.
    """
    owned = sorted(set(settings) & set(_TRAINER_OWNED))
    if owned:
        raise SpecError(
            f"{owned[0]} is the trainer's setting: set it in GRPOConfig, which scores the "
            "sampled tokens with it"
        )
    unknown = sorted(set(settings) - _ENVIRONMENT - _GENERATION)
    if unknown:
        known = ", ".join(sorted(_ENVIRONMENT | _GENERATION))
        raise SpecError(f"unknown setting {unknown[0]!r} (known: {known})")
    name = name.strip()
    if not name:
        raise SpecError("give the training run a name (name=...)")
    ds, chosen = _questions(dataset, questions, db_dir, question_ids, limit)
    environment = EnvironmentSettings(
        step_budget=step_budget, **{k: v for k, v in settings.items() if k in _ENVIRONMENT}
    )
    generation = GenerationSettings(
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
        **{k: v for k, v in settings.items() if k in _GENERATION},
    )
    spec = RunSpec(
        name=name,
        policy="hf",
        dataset=ds.name,
        questions_path=str(ds.questions_path),
        db_dir=str(ds.db_dir),
        generation=generation,
        environment=environment,
        limit=None if question_ids else limit,
        question_ids=tuple(question_ids) if question_ids else None,
        kind="training",
    )
    evaluation = _evaluation(name, eval_name, eval_dataset, eval_questions, eval_db_dir)
    opened = Store(store) if isinstance(store, str) else store
    return RolloutFunction(
        store=opened,
        spec=spec,
        dataset=ds,
        questions=chosen,
        resume=resume,
        eval_name=evaluation.name,
        eval_dataset=evaluation.dataset,
        eval_questions=evaluation.questions,
    )


def make_environment_factory(
    *,
    dataset: str | None = None,
    store: str | Store = "sqlite:///rollscope.db",
    name: str,
    questions: str | None = None,
    db_dir: str | None = None,
    step_budget: int = DEFAULT_STEP_BUDGET,
    resume: bool = False,
    eval_dataset: str | None = None,
    eval_questions: str | None = None,
    eval_db_dir: str | None = None,
    eval_name: str | None = None,
) -> ToolEnvironmentFactory:
    """The zero-argument callable to pass as `GRPOTrainer(environment_factory=...)`: each call
    makes a `SQLToolEnvironment` whose tool calls are recorded in run `name`, the trainer's
    evaluation rollouts in run `eval_name` (as `make_rollout_func`; the trainer's mode is
    read from `callback()`)."""
    ds = resolve_dataset(_training_set(dataset, questions), questions, db_dir)
    name = name.strip()
    evaluation = _evaluation(name, eval_name, eval_dataset, eval_questions, eval_db_dir)
    opened = Store(store) if isinstance(store, str) else store
    return ToolEnvironmentFactory(
        store=opened,
        name=name,
        dataset=ds,
        environment=EnvironmentSettings(step_budget=step_budget),
        resume=resume,
        eval_name=evaluation.name,
        eval_dataset=evaluation.dataset,
    )


@dataclass(frozen=True, slots=True)
class _Evaluation:
    """Where a trainer's evaluation rollouts record, and of which questions (None: the
    training's)."""

    name: str
    dataset: Dataset | None
    questions: list[Question] | None


def _evaluation(
    name: str,
    eval_name: str | None,
    eval_dataset: str | None,
    eval_questions: str | None,
    eval_db_dir: str | None,
) -> _Evaluation:
    if eval_db_dir and not eval_questions:
        raise SpecError("eval_db_dir goes with eval_questions: give the questions file too")
    chosen = eval_name.strip() if eval_name is not None else evaluation_name(name)
    if not chosen:
        raise SpecError("the evaluation run's name is empty: give eval_name=... or leave it out")
    if not (eval_dataset or eval_questions):
        return _Evaluation(chosen, None, None)
    try:
        ds, questions = _questions(eval_dataset, eval_questions, eval_db_dir, None, None)
    except (DatasetError, SpecError) as exc:  # said as the evaluation's, not the training's
        raise type(exc)(f"the evaluation's questions: {exc}") from None
    return _Evaluation(chosen, ds, questions)


def correct_reward(*, correct: Sequence[bool], **_: Any) -> list[float]:
    """1.0 for an episode whose ANSWER was right, else 0.0."""
    return [1.0 if c else 0.0 for c in correct]


def shaped_reward(*, reward: Sequence[float], **_: Any) -> list[float]:
    """The environment's total reward of the episode (rollout_core.rewards):

    1.0 for a correct ANSWER
    + 0.1 x each QUERY's gain in result overlap (F1 of rows against the gold rows) over the
      best so far (at most 0.1 in all)
    - 0.01 for each failed action (SQL error, refusal, unknown table)
    """
    return [float(r) for r in reward]


def _training_set(dataset: str | None, questions: str | None) -> str | None:
    """The dataset asked for: the demo's training split when neither it nor a file is named."""
    return dataset if dataset or questions else "demo:train"


def _questions(
    dataset: str | None,
    questions: str | None,
    db_dir: str | None,
    question_ids: Sequence[str] | None,
    limit: int | None,
) -> tuple[Dataset, list[Question]]:
    ds = resolve_dataset(_training_set(dataset, questions), questions, db_dir)
    ids = list(question_ids) if question_ids else None
    chosen = select_questions(ds, limit=None if ids else limit, question_ids=ids)
    if not chosen:
        raise SpecError(f"dataset {ds.name!r} has no questions to train on")
    return ds, chosen
