"""One client's session of the environment server: each `reset` begins an episode in the
store, each `step` plays one action through the episode's `LiveEpisode` and is committed before
the client reads its answer; a session that ends mid-episode leaves it `abandoned`."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from app.env_server.models import SQLAction, SQLObservation, SQLState, typed_action_text
from app.env_server.served import ServedRun
from rollout_core.actions import SQLAction as ParsedAction
from rollout_core.environment import SQLEnvironment
from rollout_core.episode import LiveEpisode, failed_record
from rollout_core.errors import RollscopeError
from rollout_core.records import EpisodeRecord, IterationBatch, StepRecord
from storage.models import BIG_INTEGER_RANGE, INTEGER_RANGE


class SessionError(RollscopeError, ValueError):
    """A reset the session cannot do; the client reads the message as the server's error."""


RESET_ARGUMENTS = ("question_id", "seed", "train_step", "group_index", "episode_id")


def _refuse_unknown(unknown: dict[str, Any]) -> None:
    """Refuse a reset argument the session does not take: OpenEnv would drop it unsaid, and a
    trainer's `step` for `train_step` would leave its episodes with no training step."""
    if unknown:
        names = ", ".join(repr(name) for name in sorted(unknown))
        raise SessionError(f"reset takes {', '.join(RESET_ARGUMENTS)}; not {names}")


class SQLSessionEnvironment(Environment[SQLAction, SQLObservation, SQLState]):  # type: ignore[misc]
    """The text-to-SQL environment for one client, recording into the server's run."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedRun) -> None:
        super().__init__()
        self._served = served
        self._env: SQLEnvironment | None = None
        self._episode: LiveEpisode | None = None
        self._live = False
        """An episode is begun in the store and not yet finished there."""
        self._lock = threading.Lock()

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        question_id: str | None = None,
        train_step: int | None = None,
        group_index: int | None = None,
        **unknown: Any,
    ) -> SQLObservation:
        """Begin an episode on `question_id`, or on a question drawn with `seed`; a trainer
        passes its `train_step` (and GRPO `group_index`) to have them recorded with it."""
        _refuse_unknown(unknown)
        answer, stored = self._begin(seed, question_id, train_step, group_index)
        self._stored(stored)
        return answer

    def step(
        self, action: SQLAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SQLObservation:
        """Play one action and answer once its step is in the store."""
        answer, stored = self._play(action)
        if stored is not None:
            self._stored(stored)
        return answer

    # The server calls these: the environment's work runs on the server's step threads and
    # the event loop waits for the commit, so no thread sits blocked on it.

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        question_id: str | None = None,
        train_step: int | None = None,
        group_index: int | None = None,
        **unknown: Any,
    ) -> SQLObservation:
        _refuse_unknown(unknown)
        loop = asyncio.get_running_loop()
        answer, stored = await loop.run_in_executor(
            self._served.steps, self._begin, seed, question_id, train_step, group_index
        )
        await self._stored_async(stored)
        return answer

    async def step_async(
        self, action: SQLAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SQLObservation:
        loop = asyncio.get_running_loop()
        answer, stored = await loop.run_in_executor(self._served.steps, self._play, action)
        if stored is not None:
            await self._stored_async(stored)
        return answer

    def _begin(
        self,
        seed: int | None,
        question_id: str | None,
        train_step: int | None,
        group_index: int | None,
    ) -> tuple[SQLObservation, Future[None]]:
        for name, value, held in (
            ("seed", seed, BIG_INTEGER_RANGE),
            ("train_step", train_step, INTEGER_RANGE),
            ("group_index", group_index, INTEGER_RANGE),
        ):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise SessionError(f"{name} must be a whole number, not {value!r}")
            if value not in held:
                raise SessionError(
                    f"{name} must be a whole number from {held.start:,} to {held.stop - 1:,} "
                    f"(what the store holds), not {value:,}"
                )
        if question_id is not None and not isinstance(question_id, str):
            raise SessionError(f"question_id must be text, not {question_id!r}")
        served = self._served
        with self._lock, served.writer.playing():
            ended = self._end_live()
            try:
                start = served.assign(
                    question_id, seed, train_step=train_step, group_index=group_index
                )
            except RollscopeError as exc:
                if ended:
                    served.writer.submit(IterationBatch(finished=ended))
                raise SessionError(str(exc)) from None
            env = self._environment()
            try:
                episode = LiveEpisode(env, start, conversation=False)
            except Exception as exc:  # a broken database or gold query: recorded, then said
                why = f"{type(exc).__name__}: {exc}"
                served.writer.submit(
                    IterationBatch(started=[start], finished=[*ended, failed_record(start, why)])
                )
                raise SessionError(
                    f"question {start.question_id!r} cannot be played: {why}"
                ) from None
            stored = served.writer.submit(IterationBatch(started=[start], finished=ended))
            self._episode, self._live = episode, True
            served.opened(self)
            question = env.state.question
            answer = SQLObservation(
                question=question.question,
                question_id=question.id,
                db_id=question.db_id,
                tables=list(env.tables),
                evidence=question.evidence,
                steps_left=env.step_budget,
                reward=0.0,
                metadata={
                    "episode": str(start.key),
                    "sample_index": start.sample_index,
                    "run": served.spec.name,
                },
            )
            return answer, stored

    def _play(self, action: SQLAction) -> tuple[SQLObservation, Future[None] | None]:
        """The answer to `action`, and its step's write (None when no step was played)."""
        with self._lock, self._served.writer.playing():
            episode = self._episode
            if not isinstance(action, SQLAction) or action.malformed is not None:
                why = action.malformed if isinstance(action, SQLAction) else type(action).__name__
                return self._refused(
                    f"malformed action ({why}); send action_type and argument, or raw_output"
                ), None
            if episode is None or not self._live:
                return self._refused("no episode in play: call reset() to begin one", True), None
            if action.action_type is not None:
                text = action.raw_output
                if text is None:  # the model's text never reached the server: the action sent
                    text = typed_action_text(action.action_type, action.argument)
                step = episode.play(text, action=ParsedAction(action.action_type, action.argument))
            elif action.raw_output is not None:
                step = episode.play(action.raw_output)
            else:
                return self._refused("send action_type and argument, or raw_output"), None
            finished = [episode.finish()] if step.done else []
            stored = self._served.writer.submit(IterationBatch(steps=[step], finished=finished))
            self._live = not step.done
            return _answer(episode.env, step, finished[0] if finished else None), stored

    def _stored(self, stored: Future[None]) -> None:
        try:
            stored.result()
        except Exception as exc:
            raise self._unrecorded(exc) from exc

    async def _stored_async(self, stored: Future[None]) -> None:
        try:
            await asyncio.wrap_future(stored)
        except Exception as exc:
            raise self._unrecorded(exc) from exc

    def _unrecorded(self, exc: Exception) -> RuntimeError:
        """The store did not take the episode's records: it cannot go on recorded."""
        with self._lock:
            self._episode, self._live = None, False
        return RuntimeError(
            f"the store failed ({type(exc).__name__}: {exc}); the episode is over, "
            "call reset() to begin another"
        )

    @property
    def state(self) -> SQLState:
        episode = self._episode
        if episode is None:
            return SQLState()
        env_state = episode.env.state
        return SQLState(
            episode_id=str(episode.start.key),
            step_count=env_state.step_count,
            question_id=episode.start.question_id,
            sample_index=episode.start.sample_index,
            done=not self._live,
            total_reward=env_state.total_reward,
        )

    def close(self) -> None:
        """The client left: an episode still in play ends `abandoned`, its steps kept."""
        with self._lock:
            ended = self._end_live()
            if ended:
                self._served.writer.write(IterationBatch(finished=ended))
            self._served.closed(self)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="rollscope_sql",
            description="Text-to-SQL episodes (DESCRIBE, SAMPLE, QUERY, ANSWER) over SQLite "
            "databases; every session is recorded in a rollscope store",
            version="1.0.0",
        )

    def _end_live(self) -> list[EpisodeRecord]:
        """The abandoned record of the episode in play, if one is (call with the lock)."""
        if self._episode is None or not self._live:
            return []
        self._live = False
        return [self._episode.finish(outcome="abandoned")]

    def _environment(self) -> SQLEnvironment:
        if self._env is None:
            served = self._served
            self._env = SQLEnvironment(
                dataset=served.dataset, settings=served.settings, sandbox=served.sandbox
            )
        return self._env

    def _refused(self, why: str, done: bool = False) -> SQLObservation:
        """An answer that plays no step: the session goes on."""
        env = self._episode.env if self._episode is not None else None
        step = env.state.step_count if env is not None else 0
        left = env.step_budget - step if env is not None else 0
        return SQLObservation(error=why, reward=0.0, done=done, step=step, steps_left=left)


def _answer(
    env: SQLEnvironment, step: StepRecord, finished: EpisodeRecord | None
) -> SQLObservation:
    metadata: dict[str, Any] = {}
    if finished is not None:
        metadata = {
            "outcome": finished.outcome,
            "failure_class": finished.failure_class,
            "total_reward": finished.reward,
            "progress": finished.progress,
            "operational": finished.operational,
        }
    question = env.state.question
    return SQLObservation(
        question=question.question,
        question_id=question.id,
        db_id=question.db_id,
        tables=list(env.tables),
        evidence=question.evidence,
        result="" if step.error is not None else step.observation,
        error=step.error,
        reward=step.reward,
        done=step.done,
        step=step.step_no,
        steps_left=env.step_budget - step.step_no,
        metadata=metadata,
    )
