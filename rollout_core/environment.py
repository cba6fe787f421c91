"""The SQL environment: one episode at a time over a question set and its SQLite databases.

Every read of a database, the agent's actions, the table list and the gold query alike, goes
through one `Sandbox` holding the settings' limits: the environment's own, closed by `close()`,
or one the caller shares between environments (the runner's slots) and closes itself.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Protocol

from rollout_core import rewards
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset, load_dataset
from rollout_core.failure_classes import action_key
from rollout_core.gold import GoldQueryError, gold_result
from rollout_core.grading import GRADING_FAILED, GoldResult, GradingError, grade_answer
from rollout_core.records import ACTION_KINDS, Outcome, Question
from rollout_core.sandbox import Sandbox, SandboxLimits, format_rows, run_select
from rollout_core.schema import (
    describe_table,
    list_tables,
    resolve_table,
    sample_table,
    unknown_table_message,
)
from rollout_core.settings import EnvironmentSettings


class TokenCounter(Protocol):
    """The part of a tokenizer the environment uses to cap observations."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True, slots=True)
class SQLObservation:
    """What the environment answers after a reset or a step."""

    question: str
    result: str
    """Text of the answer to the last action (empty after reset)."""
    error: str | None
    reward: float
    done: bool
    step: int = 0
    """Steps taken so far; 0 right after reset."""
    tables: list[str] = field(default_factory=list)
    db_id: str = ""
    evidence: str | None = None
    steps_left: int = 0


@dataclass
class EpisodeState:
    """Mutable state of the current episode."""

    episode_id: str
    question: Question
    step_count: int = 0
    done: bool = False
    answer: str | None = None
    answer_correct: bool | None = None
    total_reward: float = 0.0
    cumulative_progress: float = 0.0
    best_overlap: float = 0.0
    successful_steps: int = 0
    repeated_actions: int = 0
    seen_actions: set[tuple[str, str]] = field(default_factory=set)
    error: str | None = None
    """Why the episode ended in `error` (`grading failed: ...`), if it did."""

    @property
    def operational(self) -> int:
        """The original's operational signal: successful steps minus repeated actions."""
        return self.successful_steps - self.repeated_actions

    @property
    def gold_seen(self) -> bool:
        """Whether a QUERY has returned exactly the gold rows (best overlap 1.0)."""
        return self.best_overlap >= 1.0

    @property
    def outcome(self) -> Outcome | None:
        if not self.done:
            return None
        if self.error is not None:
            return "error"
        if self.answer_correct is None:
            return "budget_exhausted"
        return "correct" if self.answer_correct else "wrong"


class SQLEnvironment:
    """A text-to-SQL episode environment over a Spider-layout question set."""

    def __init__(
        self,
        questions_path: str | Path | None = None,
        db_dir: str | Path | None = None,
        tokenizer: TokenCounter | None = None,
        step_budget: int | None = None,
        *,
        dataset: Dataset | None = None,
        settings: EnvironmentSettings | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        """`step_budget`, when given, overrides `settings.step_budget`.

        Without `sandbox` the environment opens its own with `settings.sandbox` and closes it
        in `close()`; a sandbox passed in is the caller's to close, and its limits must be
        `settings.sandbox` (they are taken as such when no settings are given).
        """
        if settings is None:
            settings = EnvironmentSettings(sandbox=sandbox.limits if sandbox else SandboxLimits())
        elif sandbox is not None and sandbox.limits != settings.sandbox:
            raise ValueError(
                "the sandbox's limits differ from settings.sandbox;"
                " make the sandbox with Sandbox(settings.sandbox)"
            )
        if step_budget is not None:
            settings = replace(settings, step_budget=step_budget)  # validated again
        if dataset is None:
            if questions_path is None:
                raise ValueError("give questions_path (and db_dir) or a loaded dataset")
            dataset = load_dataset(questions_path, db_dir)
        self.dataset = dataset
        self.questions: list[Question] = list(dataset.questions)
        self._by_id = {q.id: q for q in self.questions}
        self.tokenizer = tokenizer
        self.settings = settings
        self._owns_sandbox = sandbox is None
        self.sandbox = Sandbox(settings.sandbox) if sandbox is None else sandbox
        self._state: EpisodeState | None = None
        self._tables: list[str] = []
        self._tables_of: dict[str, tuple[str, ...]] = {}
        """Each database's tables, listed once: untrusted SQL never changes a database."""

    @property
    def step_budget(self) -> int:
        """Actions per episode."""
        return self.settings.step_budget

    @property
    def limits(self) -> SandboxLimits:
        """The limits every query runs under (`settings.sandbox`, the sandbox's own)."""
        return self.sandbox.limits

    def close(self) -> None:
        """Close the environment's own sandbox (a shared one is left to its owner)."""
        if self._owns_sandbox:
            self.sandbox.close()

    def __enter__(self) -> SQLEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def tables(self) -> list[str]:
        """Table names of the current episode's database."""
        return self._tables

    @property
    def state(self) -> EpisodeState:
        if self._state is None:
            raise RuntimeError("call reset() before using the environment")
        return self._state

    def reset(self, seed: int | None = None, question_id: str | None = None) -> SQLObservation:
        """Start an episode on `question_id`, or on a question drawn with `seed`."""
        if question_id is not None:
            if question_id not in self._by_id:
                raise KeyError(f"unknown question id {question_id!r}")
            question = self._by_id[question_id]
        else:
            question = random.Random(seed).choice(self.questions)
        self._tables = self._list_tables(question)
        self._gold(question)  # fail at reset, not at ANSWER, when the gold query is broken
        self._state = EpisodeState(episode_id=uuid.uuid4().hex[:12], question=question)
        return self._observation(result="", error=None, reward=0.0)

    def step(self, action: SQLAction) -> SQLObservation:
        """Apply one action and return what the agent sees next; ValueError for an action
        type that is none of the four (a loop's own actions: it would otherwise end the
        episode as an answer)."""
        if action.action_type not in ACTION_KINDS:
            raise ValueError(
                f"unknown action type {action.action_type!r}: use one of {', '.join(ACTION_KINDS)}"
            )
        state = self.state
        if state.done:
            raise RuntimeError("the episode is over; call reset() to start another")
        state.step_count += 1
        key = action_key(action.action_type, action.argument)
        if key in state.seen_actions:
            state.repeated_actions += 1
        state.seen_actions.add(key)

        result, error, reward = self._apply(action)
        if error is None:
            state.successful_steps += 1
        elif state.error is None:  # the agent's mistake; a grader failure is not
            reward += rewards.ERROR_PENALTY
        state.total_reward += reward
        if state.step_count >= self.step_budget:
            state.done = True
        return self._observation(result=result, error=error, reward=reward)

    # -- actions ------------------------------------------------------------------------------

    def _apply(self, action: SQLAction) -> tuple[str, str | None, float]:
        kind, arg = action.action_type, action.argument
        if kind in ("DESCRIBE", "SAMPLE"):
            return self._table_action(kind, arg)
        if kind == "QUERY":
            return self._query(arg)
        return self._answer(arg)

    def _table_action(self, kind: str, arg: str) -> tuple[str, str | None, float]:
        limits = self.limits
        table = resolve_table(self._tables, arg)
        if table is None:
            return "", unknown_table_message(arg, self._tables), 0.0
        with self.sandbox.connection(self._db_path(self.state.question)) as conn:
            if kind == "DESCRIBE":
                try:
                    return self._cap(describe_table(conn, table, limits)), None, 0.0
                except sqlite3.Error as exc:  # the agent's turn fails, not the episode
                    return "", self._cap(f"cannot describe {table}: {exc}"), 0.0
            sample = sample_table(conn, table, self.settings.sample_rows, limits)
        if sample.error is not None:
            return "", self._cap(sample.error), 0.0
        return self._cap(format_rows(sample, limits)), None, 0.0

    def _query(self, sql: str) -> tuple[str, str | None, float]:
        state = self.state
        with self.sandbox.connection(self._db_path(state.question)) as conn:
            res = run_select(conn, sql, self.limits)
        if res.error is not None:
            return "", self._cap(res.error), 0.0
        gold = self._gold(state.question)
        new = rewards.overlap(res.rows, gold.rows) if not res.truncated else 0.0
        reward = rewards.progress_reward(new, state.best_overlap)
        state.best_overlap = max(state.best_overlap, new)
        state.cumulative_progress += reward
        return self._cap(format_rows(res, self.limits)), None, reward

    def _answer(self, answer: str) -> tuple[str, str | None, float]:
        state = self.state
        state.answer, state.done = answer, True
        try:
            correct = grade_answer(answer, self._gold(state.question))
        except GradingError as exc:
            # Neither right nor wrong: the episode ends in `error` with reward 0 for the answer.
            state.error = f"{GRADING_FAILED}: {exc}"
            return "Answer submitted: grading failed.", state.error, 0.0
        state.answer_correct = correct
        text = "Answer submitted: correct." if correct else "Answer submitted: incorrect."
        return text, None, rewards.ANSWER_CORRECT if correct else rewards.ANSWER_WRONG

    # -- helpers ------------------------------------------------------------------------------

    def _observation(self, *, result: str, error: str | None, reward: float) -> SQLObservation:
        state = self.state
        q = state.question
        return SQLObservation(
            question=q.question,
            result=result,
            error=error,
            reward=reward,
            done=state.done,
            step=state.step_count,
            tables=self._tables,
            db_id=q.db_id,
            evidence=q.evidence,
            steps_left=self.step_budget - state.step_count,
        )

    def _list_tables(self, question: Question) -> list[str]:
        tables = self._tables_of.get(question.db_id)
        if tables is None:
            with self.sandbox.connection(self._db_path(question)) as conn:
                tables = self._tables_of[question.db_id] = tuple(list_tables(conn))
        return list(tables)

    def _db_path(self, question: Question) -> Path:
        return self.dataset.db_path(question.db_id)

    def _gold(self, question: Question) -> GoldResult:
        try:
            return gold_result(self._db_path(question), question.gold_sql, self.sandbox)
        except GoldQueryError as exc:
            raise GoldQueryError(f"gold query of question {question.id!r} failed: {exc}") from None

    def _cap(self, text: str) -> str:
        """Cut an observation to `max_observation_tokens` tokens when a tokenizer is given."""
        if self.tokenizer is None:
            return text
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        cap = self.settings.max_observation_tokens
        if len(ids) <= cap:
            return text
        kept = self.tokenizer.decode(ids[:cap])
        return f"{kept}\n... (cut at {cap} tokens)"
