"""The SQL environment as tools, for `GRPOTrainer(environment_factory=...)`.

TRL makes one environment per rollout (pooled and reset between rollouts), turns its public
methods into tools from their type hints and docstrings, and calls `get_reward()` when the
model stops calling tools. Each tool call is one step of an episode in the store, written as it
happens; the episode ends at ANSWER, when the step budget is spent, or at `get_reward()`.
Given the trainer, the factory's callback also records how the trainer scored each batch (its
advantages and reward functions' values, `app.training.trainer_scores`): the environments of
a batch are the trainer's `environments`, in the order of its log.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from app.training.run import TrainingRun, evaluation_spec
from app.training.settings import model_name
from app.training.tools import SQLTools
from app.training.trainer_scores import (
    PlayedBatch,
    ScoredAs,
    last_batch,
    logged_prompt,
    read_scores,
)
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.episode import LiveEpisode, start_record
from rollout_core.records import (
    ActionKind,
    EpisodeKey,
    EpisodeStart,
    IterationBatch,
    PolicyInfo,
    Question,
    RunSpec,
)
from rollout_core.sandbox import Sandbox
from rollout_core.settings import EnvironmentSettings, GenerationSettings, TrainingSettings
from storage.sink import StoreSink
from storage.store import Store
from storage.training import Counters


def tool_prompt(question: Question) -> str:
    """The user message of a tool episode: the question and its database (the environment's
    `reset` adds the tables)."""
    lines = [f"Question: {question.question}"]
    if question.evidence:
        lines.append(f"Evidence: {question.evidence}")
    lines.append(f"Database: {question.db_id}")
    lines.append("Look at the database with the tools, then give the answer with `answer`.")
    return "\n".join(lines)


@dataclass(slots=True)
class _Recording:
    """Where one mode's rollouts go: training's, or evaluation's, each a run of its own."""

    run: TrainingRun
    dataset: Dataset
    group_size: int = 1
    numbering: Counters = field(default_factory=Counters)
    open_groups: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    """(step, question) -> the group being filled and how many it holds."""


class ToolEnvironmentFactory:
    """Makes `SQLToolEnvironment`s that record into one training run (the trainer's evaluation
    rollouts into run `eval_name`, each at the step it evaluated); `callback(trainer)` tells
    them the trainer's step and mode and records its scores (`trainer.add_callback(...)`)."""

    def __init__(
        self,
        *,
        store: Store,
        name: str,
        dataset: Dataset,
        environment: EnvironmentSettings,
        resume: bool = False,
        eval_name: str,
        eval_dataset: Dataset | None = None,
    ) -> None:
        self.store = store
        self.dataset = dataset
        self.environment = environment
        self.run = TrainingRun(store, name, resume=resume, evaluation=eval_name)
        self.run.check_name()
        assert self.run.evaluation is not None
        self.sandbox = Sandbox(environment.sandbox)
        self.train_step = 0
        self.model: Any = None
        """The trained model (from the callback): evaluating while it is not in training mode."""
        self._training = _Recording(self.run, dataset)
        self._evaluation = _Recording(self.run.evaluation, eval_dataset or dataset)
        self._started: RunSpec | None = None
        """The training run's spec as started (with the trainer's arguments, given them)."""
        self._scored: tuple[int | None, tuple[EpisodeKey, ...]] = (None, ())
        """The run and episodes of the last batch whose scores were recorded (a batch the
        trainer trains several optimizer steps on is recorded once)."""
        self._lock = threading.Lock()
        self._spec = RunSpec(
            name=name,
            policy="hf",
            dataset=dataset.name,
            questions_path=str(dataset.questions_path),
            db_dir=str(dataset.db_dir),
            generation=GenerationSettings(),
            environment=environment,
            kind="training",
        )

    def __call__(self) -> SQLToolEnvironment:
        return SQLToolEnvironment(self)

    @property
    def num_generations(self) -> int:
        """The trainer's GRPO group size (from its arguments, at `begin`)."""
        return self._training.group_size

    @num_generations.setter
    def num_generations(self, size: int) -> None:
        self._training.group_size = size

    @property
    def evaluating(self) -> bool:
        """Whether the trainer is evaluating (its model out of training mode)."""
        return self.model is not None and not bool(self.model.training)

    def begin(self, args: Any, model: Any, at_step: int, eval_sets: Any = None) -> None:
        """The trainer begins (or resumes) at `at_step`: start the run with its arguments.
        `eval_sets`: the trainer's eval_dataset, whose rows must name the evaluation's
        questions (refused here, before a step, rather than at the first evaluation)."""
        for data in eval_sets.values() if isinstance(eval_sets, dict) else [eval_sets]:
            if "question_id" in (getattr(data, "column_names", None) or ()):
                asked = {str(q) for q in data["question_id"]}
                if unknown := {q for q in asked if q not in self._evaluation.dataset}:
                    raise ValueError(
                        f"the trainer's eval set asks question {min(unknown)!r}, which the "
                        f"evaluation's questions ({self._evaluation.dataset.name}) do not hold: "
                        "give make_environment_factory the eval set's questions as "
                        "eval_dataset= (or eval_questions=)"
                    )
        self.model = model
        self.train_step = at_step
        self._training.group_size = int(getattr(args, "num_generations", 1) or 1)
        evaluated = getattr(args, "num_generations_eval", None)
        self._evaluation.group_size = int(evaluated or self._training.group_size)
        self.start(_settings_from_args(args, model), at_step)

    def start(self, settings: Any = None, at_step: int | None = None) -> int:
        """The run's id, creating it on first use (`settings`: the trainer's arguments;
        `at_step`: the training step the trainer begins at, `TrainingRun.start`)."""
        with self._lock:
            if self.run.run_id is None:
                spec = self._spec
                if settings is not None:
                    spec = RunSpec(**{**_fields(spec), "training": settings})
                info = PolicyInfo(name="tools")
                _, self._training.numbering = self.run.start(spec, None, info, at_step=at_step)
                self._started = spec
            assert self.run.run_id is not None
            return self.run.run_id

    def recording_into(self) -> tuple[int, Dataset]:
        """The run the episode about to begin records into, and its questions: the
        evaluation's while the trainer evaluates (opened at its first evaluation, which on a
        resumed run replaces the evaluations of that step and later)."""
        if not self.evaluating:
            return self.start(), self.dataset
        into = self._evaluation
        with self._lock:
            if into.run.run_id is None:
                started = self._started or self._spec
                spec = evaluation_spec(started, into.run.name, into.dataset, into.group_size)
                info = PolicyInfo(name="tools")
                _, into.numbering = into.run.start(spec, None, info, at_step=self.train_step)
            assert into.run.run_id is not None
            return into.run.run_id, into.dataset

    def assign(self, question: Question, run_id: int) -> EpisodeStart:
        """The next episode of a question in run `run_id`: its sample index, seed, training
        step and group."""
        into = self._training if run_id == self.run.run_id else self._evaluation
        with self._lock:
            numbering = into.numbering
            index = numbering.next_sample.get(question.id, 0)
            numbering.next_sample[question.id] = index + 1
            slot = (self.train_step, question.id)
            group, members = into.open_groups.get(slot, (-1, into.group_size))
            if members >= into.group_size:  # the group is full: open the next one
                group, members = numbering.next_group, 0
                numbering.next_group += 1
            into.open_groups[slot] = (group, members + 1)
            return start_record(
                question,
                index,
                None,  # the trainer sampled the rollout, with no seed of rollscope's
                train_step=self.train_step,
                group_index=group,
            )

    def record_scores(self, trainer: Any) -> None:
        """Record the trainer's advantages and rewards of its last batch, played by its
        `environments` in the order of its log; nothing where that batch is not all this
        factory's episodes, or its log does not hold it."""
        played = last_batch(
            trainer,
            lambda env: (
                env.scored_as
                if isinstance(env, SQLToolEnvironment) and env._factory is self
                else None
            ),
        )
        if played is None:
            return
        # A batch is the trainer's training or its evaluation: one run's episodes.
        runs = {env.run_id for env in trainer.environments}
        if len(runs) != 1 or None in runs:
            return
        (run_id,) = runs
        keys = tuple(key for key, _ in played)
        if (run_id, keys) == self._scored:
            return
        ids = self.store.episode_ids(run_id, keys)
        if len(ids) != len(keys):
            return
        prompts = [prompt for _, prompt in played]
        scores = read_scores(trainer, PlayedBatch(prompts, [ids[k] for k in keys]))
        if scores:
            self.store.record_trainer_scores(run_id, scores)
            self._scored = (run_id, keys)

    def callback(self, trainer: Any = None) -> Any:
        """A TrainerCallback: starts the run with the trainer's arguments, follows its global
        step, and completes the run when training ends. Given the trainer (add it with
        `trainer.add_callback(factory.callback(trainer))`), it records the trainer's scores of
        each batch after the step or evaluation that scored it."""
        from transformers import TrainerCallback

        factory = self

        def scored() -> None:
            if trainer is not None:
                factory.record_scores(trainer)

        class _Follow(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                # A trainer resumed from a checkpoint has its step back by now.
                eval_sets = getattr(trainer, "eval_dataset", None)
                factory.begin(args, kw.get("model"), int(state.global_step), eval_sets)

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                factory.train_step = int(state.global_step)

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                # The step is counted by now: an evaluation after it is of its weights.
                factory.train_step = int(state.global_step)
                scored()

            def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()
                factory.run.finish("completed")

        return _Follow()


class SQLToolEnvironment(SQLTools):
    """One episode at a time of the text-to-SQL environment, played through tool calls."""

    def __init__(self, factory: ToolEnvironmentFactory) -> None:
        self._factory = factory
        self._envs: dict[int, SQLEnvironment] = {}
        """The environment of each run's questions (training's, and evaluation's)."""
        self._sinks: dict[int, StoreSink] = {}
        self._env: SQLEnvironment | None = None
        self._sink: StoreSink | None = None
        self.run_id: int | None = None
        """The run of the last episode begun."""
        self._episode: LiveEpisode | None = None
        self._recorded = True
        """Whether the episode's record is written (it ended, or none was begun)."""
        self.start: EpisodeStart | None = None
        """The last episode begun."""
        self.trainer_prompt: list[dict[str, Any]] | None = None
        """Its prompt as the trainer logs it: the row's, the tables added (`logged_prompt`)."""

    @property
    def scored_as(self) -> ScoredAs | None:
        """The last episode begun and its prompt as the trainer logs it, once both are known."""
        if self.start is None or self.trainer_prompt is None:
            return None
        return self.start.key, self.trainer_prompt

    def reset(self, **row: Any) -> str | None:
        """Open the row's question (`question_id`); returns the tables to add to the prompt."""
        self._end_episode()
        factory = self._factory
        run_id, dataset = factory.recording_into()
        question = dataset.by_id(str(row["question_id"]))
        if run_id not in self._envs:
            self._envs[run_id] = SQLEnvironment(
                dataset=dataset, settings=factory.environment, sandbox=factory.sandbox
            )
            self._sinks[run_id] = factory.store.sink(run_id)
        self._env, self._sink, self.run_id = self._envs[run_id], self._sinks[run_id], run_id
        start = factory.assign(question, run_id)
        # The trainer builds the model's prompt itself: the steps record none.
        self._episode = LiveEpisode(self._env, start, conversation=False)
        self._sink.write(IterationBatch(started=[start]))
        self._recorded = False
        tables = "\n\nTables: " + ", ".join(self._env.tables)
        self.start = start
        self.trainer_prompt = logged_prompt(row.get("prompt"), tables)
        return tables

    def get_reward(self) -> float:
        """The episode's total reward (ends it when the model stopped without answering)."""
        env = self._env
        reward = env.state.total_reward if self._episode is not None and env is not None else 0.0
        self._end_episode()
        return reward

    def _act(self, kind: ActionKind, argument: str, call: str) -> str:
        episode, sink = self._episode, self._sink
        if episode is None or sink is None or self._recorded:
            raise RuntimeError("the episode is over; no more tool calls")
        step = episode.play(call, action=SQLAction(kind, argument))
        finished = [episode.finish()] if step.done else []
        sink.write(IterationBatch(steps=[step], finished=finished))
        self._recorded = step.done
        return step.observation or ""  # rollscope's environment answers every step

    def _end_episode(self) -> None:
        """Finish an episode the model left without an answer."""
        if self._recorded or self._episode is None or self._sink is None:
            return
        self._sink.write(IterationBatch(finished=[self._episode.finish()]))
        self._recorded = True


def _fields(spec: RunSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


def _settings_from_args(args: Any, model: Any) -> Any:
    return TrainingSettings(
        model=model_name(model),
        learning_rate=float(args.learning_rate),
        num_generations=int(getattr(args, "num_generations", 1) or 1),
        beta=float(getattr(args, "beta", 0.0) or 0.0),
        max_steps=int(args.max_steps),
        num_train_epochs=float(args.num_train_epochs),
        per_device_train_batch_size=int(args.per_device_train_batch_size),
        gradient_accumulation_steps=int(args.gradient_accumulation_steps),
        temperature=float(getattr(args, "temperature", 1.0)),
        top_p=float(getattr(args, "top_p", 1.0)),
        seed=int(args.seed),
    )
