"""The SQL environment as tools, for `GRPOTrainer(environment_factory=...)`.

TRL makes one environment per rollout (pooled and reset between rollouts), turns its public
methods into tools from their type hints and docstrings, and calls `get_reward()` when the
model stops calling tools. Each tool call is one step of an episode in the store, written as it
happens; the episode ends at ANSWER, when the step budget is spent, or at `get_reward()`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from app.training.run import TrainingRun
from app.training.settings import model_name
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.prompts import format_observation
from rollout_core.records import (
    ActionKind,
    EpisodeKey,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    PolicyInfo,
    Question,
    RunSpec,
    StepRecord,
)
from rollout_core.runner import episode_seed
from rollout_core.sandbox import Sandbox
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.store import Store
from storage.training import Counters, GroupTag, TrainingSink


def tool_prompt(question: Question) -> str:
    """The user message of a tool episode: the question and its database (the environment's
    `reset` adds the tables)."""
    lines = [f"Question: {question.question}"]
    if question.evidence:
        lines.append(f"Evidence: {question.evidence}")
    lines.append(f"Database: {question.db_id}")
    lines.append("Look at the database with the tools, then give the answer with `answer`.")
    return "\n".join(lines)


class ToolEnvironmentFactory:
    """Makes `SQLToolEnvironment`s that record into one training run; `callback()` tells them
    the trainer's step (pass it in `GRPOTrainer(callbacks=[...])`)."""

    def __init__(
        self,
        *,
        store: Store,
        name: str,
        dataset: Dataset,
        environment: EnvironmentSettings,
        resume: bool = False,
    ) -> None:
        self.store = store
        self.dataset = dataset
        self.environment = environment
        self.run = TrainingRun(store, name, resume=resume)
        self.run.check_name()
        self.sandbox = Sandbox(environment.sandbox)
        self.train_step = 0
        self.num_generations = 1
        self.tags: dict[EpisodeKey, GroupTag] = {}
        self._numbering = Counters()
        self._open_groups: dict[tuple[int, str], tuple[int, int]] = {}
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

    def start(self, settings: Any = None) -> int:
        """The run's id, creating it on first use (`settings`: the trainer's arguments)."""
        with self._lock:
            if self.run.run_id is None:
                spec = self._spec
                if settings is not None:
                    spec = RunSpec(**{**_fields(spec), "training": settings})
                _, self._numbering = self.run.start(spec, 0, PolicyInfo(name="tools"))
            assert self.run.run_id is not None
            return self.run.run_id

    def assign(self, question_id: str) -> tuple[EpisodeKey, GroupTag, int]:
        """The next episode of a question: its key, its step and group, its seed."""
        with self._lock:
            numbering = self._numbering
            index = numbering.next_sample.get(question_id, 0)
            numbering.next_sample[question_id] = index + 1
            slot = (self.train_step, question_id)
            group, members = self._open_groups.get(slot, (-1, self.num_generations))
            if members >= self.num_generations:  # the group is full: open the next one
                group, members = numbering.next_group, 0
                numbering.next_group += 1
            self._open_groups[slot] = (group, members + 1)
            key = EpisodeKey(question_id, index)
            self.tags[key] = GroupTag(self.train_step, group)
            return key, self.tags[key], episode_seed(0, question_id, index)

    def callback(self) -> Any:
        """A TrainerCallback: starts the run with the trainer's arguments, follows its global
        step, and completes the run when training ends."""
        from transformers import TrainerCallback

        factory = self

        class _Follow(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                factory.num_generations = int(getattr(args, "num_generations", 1) or 1)
                factory.start(_settings_from_args(args, kw.get("model")))

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                factory.train_step = int(state.global_step)

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                factory.run.finish("completed")

        return _Follow()


class SQLToolEnvironment:
    """One episode at a time of the text-to-SQL environment, played through tool calls."""

    def __init__(self, factory: ToolEnvironmentFactory) -> None:
        self._factory = factory
        self._env = SQLEnvironment(
            dataset=factory.dataset, settings=factory.environment, sandbox=factory.sandbox
        )
        self._sink: TrainingSink | None = None
        self._key: EpisodeKey | None = None
        self._started = 0.0
        self._over = True

    def reset(self, **row: Any) -> str | None:
        """Open the row's question (`question_id`); returns the tables to add to the prompt."""
        self._end_episode()
        question_id = str(row["question_id"])
        run_id = self._factory.start()
        if self._sink is None:
            self._sink = TrainingSink(self._factory.store, run_id, self._factory.tags)
        obs = self._env.reset(question_id=question_id)
        key, _, seed = self._factory.assign(question_id)
        q = self._env.state.question
        self._sink.write(
            IterationBatch(
                started=[
                    EpisodeStart(
                        key.question_id, key.sample_index, seed, q.db_id, q.question, q.gold_sql
                    )
                ]
            )
        )
        self._key, self._started, self._over = key, time.perf_counter(), False
        return "\n\nTables: " + ", ".join(obs.tables)

    def describe(self, table: str) -> str:
        """Show the columns, types, keys and row count of a table.

        Args:
            table: The table's name.
        """
        return self._act("DESCRIBE", table)

    def sample(self, table: str) -> str:
        """Show the first rows of a table.

        Args:
            table: The table's name.
        """
        return self._act("SAMPLE", table)

    def query(self, sql: str) -> str:
        """Run one SELECT statement on the database and show its rows.

        Args:
            sql: A single SQLite SELECT statement.
        """
        return self._act("QUERY", sql)

    def answer(self, value: str) -> str:
        """Submit the final answer; the episode ends.

        Args:
            value: The answer; several values as a JSON list, e.g. ["a", "b"].
        """
        return self._act("ANSWER", value)

    def get_reward(self) -> float:
        """The episode's total reward (ends it when the model stopped without answering)."""
        reward = self._env.state.total_reward if self._key is not None else 0.0
        self._end_episode()
        return reward

    def _act(self, kind: ActionKind, argument: str) -> str:
        if self._over or self._key is None or self._sink is None:
            raise RuntimeError("the episode is over; no more tool calls")
        t0 = time.perf_counter()
        obs = self._env.step(SQLAction(action_type=kind, argument=argument))
        text = format_observation(obs)
        step = StepRecord(
            question_id=self._key.question_id,
            sample_index=self._key.sample_index,
            step_no=obs.step,
            prompt="[]",
            raw_output=f"{kind} {argument}",
            action=kind,
            argument=argument,
            parsed=True,
            observation=text,
            error=obs.error,
            reward=obs.reward,
            done=obs.done,
            env_seconds=time.perf_counter() - t0,
        )
        finished = [self._record()] if obs.done else []
        self._sink.write(IterationBatch(steps=[step], finished=finished))
        self._over = obs.done
        return text

    def _record(self) -> EpisodeRecord:
        assert self._key is not None
        state = self._env.state
        return EpisodeRecord(
            question_id=self._key.question_id,
            sample_index=self._key.sample_index,
            outcome=state.outcome or "budget_exhausted",
            reward=state.total_reward,
            progress=state.cumulative_progress,
            operational=float(state.operational),
            steps=state.step_count,
            answer=state.answer,
            duration_seconds=time.perf_counter() - self._started,
            error=state.error,
        )

    def _end_episode(self) -> None:
        """Finish an episode the model left without an answer."""
        if self._over or self._sink is None:
            return
        self._sink.write(IterationBatch(finished=[self._record()]))
        self._over = True


def _fields(spec: RunSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


def _settings_from_args(args: Any, model: Any) -> Any:
    from rollout_core.settings import TrainingSettings

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
