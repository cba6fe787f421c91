"""The batched runner: all live episodes advance in lockstep, one policy call per iteration.

Each iteration collects the conversation of every live episode, asks the policy once for the
whole batch, parses and steps each environment, and hands the iteration's records to the sink
in one call. A finished episode's slot is refilled from the queue, so the batch stays full.
"""

from __future__ import annotations

import dataclasses
import json
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rollout_core.datasets import Dataset
from rollout_core.environment import SQLEnvironment, TokenCounter
from rollout_core.failure_classes import StepFacts, classify_episode
from rollout_core.fork_replay import ForkStart, replay_prefix
from rollout_core.parse import parse_model_output
from rollout_core.policies.base import (
    Completion,
    Messages,
    Policy,
    PolicyOutOfMemory,
    PolicyRequest,
)
from rollout_core.prompts import format_observation, initial_messages
from rollout_core.records import (
    EpisodeKey,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    Outcome,
    Question,
    Sink,
    StepRecord,
)
from rollout_core.sandbox import Sandbox
from rollout_core.settings import DEFAULT_BATCH_SIZE, EnvironmentSettings

RunEnd = Literal["completed", "cancelled"]


def episode_seed(run_seed: int, question_id: str, sample_index: int) -> int:
    """A stable per-episode seed: the same (run seed, question, sample) always gets the same."""
    return zlib.crc32(f"{run_seed}:{question_id}:{sample_index}".encode()) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class EpisodeTask:
    """One episode to play: a question and which of its samples this is."""

    question: Question
    sample_index: int
    seed: int
    fork: ForkStart | None = None
    """For a fork: the recorded steps replayed before the policy's first turn."""

    @property
    def key(self) -> EpisodeKey:
        return EpisodeKey(self.question.id, self.sample_index)


def plan_episodes(
    questions: Sequence[Question],
    samples: int,
    run_seed: int,
    *,
    skip: Iterable[EpisodeKey] = (),
) -> list[EpisodeTask]:
    """Every (question, sample) pair, in order, minus those in `skip` (already finished)."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    done = set(skip)
    return [
        EpisodeTask(q, s, episode_seed(run_seed, q.id, s))
        for q in questions
        for s in range(samples)
        if EpisodeKey(q.id, s) not in done
    ]


@dataclass
class RunStats:
    """Counters the runner keeps while it plays; also what `run_episodes` returns."""

    episodes: int = 0
    correct: int = 0
    steps: int = 0
    policy_calls: int = 0
    policy_seconds: float = 0.0
    wall_seconds: float = 0.0
    batch_size: int = 0
    """The batch size in force at the end (smaller than asked after out-of-memory halving)."""
    end: RunEnd = "completed"
    notes: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.episodes if self.episodes else 0.0


@dataclass
class _Live:
    task: EpisodeTask
    env: SQLEnvironment
    messages: Messages
    started: float
    facts: list[StepFacts] = field(default_factory=list)
    """What the failure classifier reads of each step played so far."""


def run_episodes(
    dataset: Dataset,
    tasks: Sequence[EpisodeTask],
    policy: Policy,
    sink: Sink,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    environment: EnvironmentSettings | None = None,
    step_budget: int | None = None,
    tokenizer: TokenCounter | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> RunStats:
    """Play `tasks` with `policy`, writing every iteration to `sink`; returns the counters.

    `environment` holds the step budget and the limits every environment enforces (or give
    `step_budget` alone, for the defaults with that budget); all environment slots share one
    sandbox, closed when the run ends, on an exception too. Observations are capped in the
    tokens of `tokenizer`, else of the policy's own tokenizer when it has one.
    `should_stop` is checked after each iteration's write: when it says so the run ends with
    `end="cancelled"` and the unfinished episodes are left unfinished (resume replays them).
    Exceptions from the policy propagate after nothing half-written reached the sink.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if environment is not None and step_budget is not None:
        raise ValueError("give run_episodes an environment or a step_budget, not both")
    settings = environment or EnvironmentSettings()
    if step_budget is not None:
        settings = dataclasses.replace(settings, step_budget=step_budget)
    counter = tokenizer if tokenizer is not None else policy.tokenizer
    with Sandbox(settings.sandbox) as sandbox:
        envs = [
            SQLEnvironment(dataset=dataset, tokenizer=counter, settings=settings, sandbox=sandbox)
            for _ in range(min(batch_size, len(tasks)))
        ]
        return _run_episodes(
            dataset,
            tasks,
            policy,
            sink,
            batch_size,
            settings.step_budget,
            envs,
            should_stop,
            on_episode,
            on_note,
        )


def _run_episodes(
    dataset: Dataset,
    tasks: Sequence[EpisodeTask],
    policy: Policy,
    sink: Sink,
    batch_size: int,
    step_budget: int,
    free_envs: list[SQLEnvironment],
    should_stop: Callable[[], bool] | None,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
    on_note: Callable[[str], None] | None,
) -> RunStats:
    stats = RunStats(batch_size=batch_size)
    queue = deque(tasks)
    live: list[_Live] = []
    t_start = time.perf_counter()

    while queue or live:
        started: list[EpisodeStart] = []
        finished: list[EpisodeRecord] = []
        steps: list[StepRecord] = []  # a fork's replayed steps first, then this turn's
        while queue and len(live) < stats.batch_size and free_envs:
            task = queue.popleft()
            env = free_envs.pop()
            t_episode = time.perf_counter()
            try:
                obs = env.reset(seed=task.seed, question_id=task.question.id)
            except Exception as exc:  # a broken gold query or database: record, keep going
                started.append(_start_record(task))
                finished.append(_failed_record(task, f"{type(exc).__name__}: {exc}"))
                free_envs.append(env)
                continue
            started.append(_start_record(task))
            messages = initial_messages(obs, step_budget)
            if task.fork is not None:
                replay = replay_prefix(
                    env,
                    task.fork,
                    messages,
                    question_id=task.question.id,
                    sample_index=task.sample_index,
                )
                steps.extend(replay.steps)
                if replay.divergence is not None:
                    ended = _Live(task, env, messages, t_episode)
                    finished.append(_episode_record(ended, error=replay.divergence))
                    free_envs.append(env)
                    continue
                messages = replay.messages
            live.append(_Live(task, env, messages, t_episode))
        if not live:
            sink.write(IterationBatch(started=started, steps=steps, finished=finished))
            stats.steps += len(steps)
            _count(stats, finished, on_episode)
            continue

        requests = [_request(ep, dataset, step_budget) for ep in live]
        t0 = time.perf_counter()
        completions = _generate(policy, requests, stats, on_note)
        policy_dt = time.perf_counter() - t0
        stats.policy_calls += 1
        stats.policy_seconds += policy_dt

        still: list[_Live] = []
        for ep, req, out in zip(live, requests, completions, strict=True):
            record, done = _step(ep, req, out, policy_dt / len(live))
            steps.append(record)
            if done:
                finished.append(_episode_record(ep))
                free_envs.append(ep.env)
            else:
                still.append(ep)
        live = still
        if finished:  # policies that keep per-episode caches forget these
            policy.release([e.key for e in finished])
        sink.write(IterationBatch(started=started, steps=steps, finished=finished))
        stats.steps += len(steps)
        _count(stats, finished, on_episode)
        if should_stop is not None and should_stop():
            stats.end = "cancelled"
            break

    stats.wall_seconds = time.perf_counter() - t_start
    return stats


def _generate(
    policy: Policy,
    requests: list[PolicyRequest],
    stats: RunStats,
    on_note: Callable[[str], None] | None,
) -> list[Completion]:
    """One policy call; on out-of-memory, halve the batch for good and split this call."""
    try:
        return policy.generate(requests)
    except PolicyOutOfMemory:
        if len(requests) == 1:
            raise
        half = len(requests) // 2
        stats.batch_size = max(1, min(stats.batch_size, len(requests)) // 2)
        note = f"out of memory at batch {len(requests)}: continuing with batch {stats.batch_size}"
        stats.notes.append(note)
        if on_note is not None:
            on_note(note)
        return _generate(policy, requests[:half], stats, on_note) + _generate(
            policy, requests[half:], stats, on_note
        )


def _request(ep: _Live, dataset: Dataset, step_budget: int) -> PolicyRequest:
    state = ep.env.state
    return PolicyRequest(
        messages=list(ep.messages),
        question=ep.task.question,
        db_path=dataset.db_path(ep.task.question.db_id),
        step_no=state.step_count + 1,
        seed=ep.task.seed,
        tables=tuple(ep.env.tables),
        steps_left=step_budget - state.step_count,
        episode=ep.task.key,
    )


def _step(
    ep: _Live, req: PolicyRequest, out: Completion, policy_seconds: float
) -> tuple[StepRecord, bool]:
    action = parse_model_output(out.text)
    t0 = time.perf_counter()
    obs = ep.env.step(action)
    env_dt = time.perf_counter() - t0
    observation = format_observation(obs)
    ep.facts.append(StepFacts(action.action_type, action.argument, action.parsed, obs.error))
    ep.messages.append({"role": "assistant", "content": out.text})
    ep.messages.append({"role": "user", "content": observation})
    record = StepRecord(
        question_id=ep.task.question.id,
        sample_index=ep.task.sample_index,
        step_no=req.step_no,
        prompt=json.dumps(req.messages, ensure_ascii=False),
        raw_output=out.text,
        action=action.action_type,
        argument=action.argument,
        parsed=action.parsed,
        observation=observation,
        error=obs.error,
        reward=obs.reward,
        done=obs.done,
        tokens_in=out.tokens_in,
        tokens_out=out.tokens_out,
        policy_seconds=policy_seconds,
        env_seconds=env_dt,
        tokens=out.tokens,
        truncated=out.truncated,
        cached_tokens=out.cached_tokens,
    )
    return record, obs.done


def _start_record(task: EpisodeTask) -> EpisodeStart:
    q = task.question
    return EpisodeStart(
        question_id=q.id,
        sample_index=task.sample_index,
        seed=task.seed,
        db_id=q.db_id,
        question=q.question,
        gold_sql=q.gold_sql,
        forked_from=None if task.fork is None else task.fork.source_episode,
        fork_step=None if task.fork is None else task.fork.step,
    )


def _episode_record(ep: _Live, *, error: str | None = None) -> EpisodeRecord:
    """The finished episode's record; `error` ends an unfinished one in `error` (a fork whose
    replay did not reproduce its source)."""
    state = ep.env.state
    outcome: Outcome | None = "error" if error is not None else state.outcome
    assert outcome is not None
    return EpisodeRecord(
        question_id=ep.task.question.id,
        sample_index=ep.task.sample_index,
        outcome=outcome,
        reward=state.total_reward,
        progress=state.cumulative_progress,
        operational=float(state.operational),
        steps=state.step_count,
        answer=state.answer,
        duration_seconds=time.perf_counter() - ep.started,
        error=error if error is not None else state.error,
        failure_class=classify_episode(outcome, ep.facts, gold_seen=state.gold_seen),
    )


def _failed_record(task: EpisodeTask, error: str) -> EpisodeRecord:
    return EpisodeRecord(
        question_id=task.question.id,
        sample_index=task.sample_index,
        outcome="error",
        reward=0.0,
        progress=0.0,
        operational=0.0,
        steps=0,
        answer=None,
        duration_seconds=0.0,
        error=error,
        failure_class=classify_episode("error", (), gold_seen=False),
    )


def _count(
    stats: RunStats,
    finished: Sequence[EpisodeRecord],
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
) -> None:
    for rec in finished:
        stats.episodes += 1
        stats.correct += rec.outcome == "correct"
        if on_episode is not None:
            on_episode(rec, stats)
