"""The batched runner: all live episodes advance in lockstep, one policy call per iteration.

Each iteration collects the conversation of every live episode, asks the policy once for the
whole batch, parses and steps each environment, and hands the iteration's records to the sink
in one call. A finished episode's slot is refilled from the queue, so the batch stays full.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rollout_core.datasets import Dataset
from rollout_core.environment import SQLEnvironment, TokenCounter
from rollout_core.episode import LiveEpisode, failed_record, start_record
from rollout_core.fork_replay import ForkStart, replay_prefix
from rollout_core.policies.base import Completion, Policy, PolicyOutOfMemory, PolicyRequest
from rollout_core.records import (
    EpisodeKey,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
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
    train_step: int | None = None
    """For a training run: the trainer's step this episode is played at."""
    group_index: int | None = None
    """For a training run: the GRPO group it belongs to."""

    @property
    def key(self) -> EpisodeKey:
        return EpisodeKey(self.question.id, self.sample_index)

    def start(self) -> EpisodeStart:
        """The episode's start record."""
        fork = self.fork
        return start_record(
            self.question,
            self.sample_index,
            self.seed,
            forked_from=None if fork is None else fork.source_episode,
            fork_step=None if fork is None else fork.step,
            train_step=self.train_step,
            group_index=self.group_index,
        )


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
    `should_stop` is checked after each iteration's write, and between episodes that fail as
    they begin: when it says so the run ends with `end="cancelled"` and the unfinished
    episodes are left unfinished (resume replays them).
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
    free_envs: list[SQLEnvironment],
    should_stop: Callable[[], bool] | None,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
    on_note: Callable[[str], None] | None,
) -> RunStats:
    stats = RunStats(batch_size=batch_size)
    queue = deque(tasks)
    live: list[tuple[EpisodeTask, LiveEpisode]] = []
    t_start = time.perf_counter()

    while queue or live:
        started: list[EpisodeStart] = []
        finished: list[EpisodeRecord] = []
        steps: list[StepRecord] = []  # a fork's replayed steps first, then this turn's
        while queue and len(live) < stats.batch_size and free_envs:
            if finished and should_stop is not None and should_stop():
                break  # a stretch of episodes failing at reset (a slow gold query) is stoppable
            task = queue.popleft()
            env = free_envs.pop()
            start = task.start()
            started.append(start)
            try:
                episode = LiveEpisode(env, start)
            except Exception as exc:  # a broken gold query or database: record, keep going
                finished.append(failed_record(start, f"{type(exc).__name__}: {exc}"))
                free_envs.append(env)
                continue
            if task.fork is not None:
                replayed, divergence = replay_prefix(episode, task.fork)
                steps.extend(replayed)
                if divergence is not None:
                    finished.append(episode.finish(error=divergence))
                    free_envs.append(env)
                    continue
            live.append((task, episode))
        if not live:  # every episode begun failed at reset: no policy call, the same check
            sink.write(IterationBatch(started=started, steps=steps, finished=finished))
            stats.steps += len(steps)
            _count(stats, finished, on_episode)
            if should_stop is not None and should_stop():
                stats.end = "cancelled"
                break
            continue

        requests = [_request(task, episode, dataset) for task, episode in live]
        t0 = time.perf_counter()
        completions = _generate(policy, requests, stats, on_note)
        policy_dt = time.perf_counter() - t0
        stats.policy_calls += 1
        stats.policy_seconds += policy_dt

        still: list[tuple[EpisodeTask, LiveEpisode]] = []
        share = policy_dt / len(live)
        for (task, episode), out in zip(live, completions, strict=True):
            steps.append(episode.play(out, policy_seconds=share))
            if episode.done:
                finished.append(episode.finish())
                free_envs.append(episode.env)
            else:
                still.append((task, episode))
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


def _request(task: EpisodeTask, episode: LiveEpisode, dataset: Dataset) -> PolicyRequest:
    env = episode.env
    assert episode.messages is not None  # the runner's episodes keep their conversation
    return PolicyRequest(
        messages=list(episode.messages),
        question=task.question,
        db_path=dataset.db_path(task.question.db_id),
        step_no=episode.step_no,
        seed=task.seed,
        tables=tuple(env.tables),
        steps_left=env.step_budget - env.state.step_count,
        episode=task.key,
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
