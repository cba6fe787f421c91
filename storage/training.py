"""Training runs in the store: the runner's sink that tags each episode with its training step
and GRPO group, and the reads of the Training page.

A training run's episodes are keyed like any other, (question_id, sample_index), with
`sample_index` counting a question's episodes over the whole run; `train_step` (the trainer's
global step when the episode was played) and `group_index` (the GRPO group, numbered over the
run) say where in training each one belongs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Float, Integer, Table, bindparam, case, func, select, update
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeKey, IterationBatch, Outcome, StepRecord
from storage.models import Episode
from storage.prompt_store import PromptWriter
from storage.sql_limits import literal_limit
from storage.store import Store
from storage.writes import retry_locked, write_batch

_EPISODES = cast(Table, Episode.__table__)

ZERO_STD = 1e-8
"""A group whose rewards spread less than this has no learning signal (TRL's `isclose` to 0)."""


@dataclass(frozen=True, slots=True)
class GroupTag:
    """Where an episode belongs in training."""

    train_step: int
    group_index: int


_TAG = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        train_step=bindparam("b_step", type_=Integer),
        group_index=bindparam("b_group", type_=Integer),
    )
)
_TOKENS = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        mean_logprob=bindparam("b_logprob", type_=Float),
        tokens_out=bindparam("b_tokens", type_=Integer),
    )
)


@dataclass
class _Tokens:
    """Running sums of an episode's model tokens."""

    count: int = 0
    logprob_sum: float = 0.0
    scored: int = 0
    """Tokens with a log-probability (a policy may report none)."""

    def plus(self, steps: Sequence[StepRecord]) -> _Tokens:
        out = _Tokens(self.count, self.logprob_sum, self.scored)
        for s in steps:
            if s.tokens is None:
                out.count += s.tokens_out or 0
                continue
            out.count += len(s.tokens.text)
            if s.tokens.logprobs is not None:
                out.logprob_sum += math.fsum(s.tokens.logprobs)
                out.scored += len(s.tokens.logprobs)
        return out

    @property
    def mean_logprob(self) -> float | None:
        return self.logprob_sum / self.scored if self.scored else None


class TrainingSink:
    """A training run's sink: each `write` is one transaction holding the iteration's records,
    the new episodes' training step and group, and the finished episodes' token statistics."""

    def __init__(self, store: Store, run_id: int, tags: Mapping[EpisodeKey, GroupTag]) -> None:
        self.store = store
        self.run_id = run_id
        self.tags = tags
        """Every episode the runner will start, with its step and group."""
        self.episode_ids: dict[EpisodeKey, int] = {}
        """Store ids of the episodes written so far."""
        self._live: dict[EpisodeKey, int] = {}
        self._tokens: dict[EpisodeKey, _Tokens] = {}
        self._prompts = PromptWriter()

    def write(self, batch: IterationBatch) -> None:
        missing = [s.key for s in batch.started if s.key not in self.tags]
        if missing:
            raise ValueError(f"episode {missing[0]} has no training step and group")
        by_key: dict[EpisodeKey, list[StepRecord]] = {}
        for s in batch.steps:
            by_key.setdefault(s.key, []).append(s)
        tokens = {k: self._tokens.get(k, _Tokens()).plus(v) for k, v in by_key.items()}

        def attempt() -> dict[EpisodeKey, int]:
            with self.store._writing() as session:
                created = write_batch(session, self.run_id, batch, self._live, self._prompts)
                ids = {**self._live, **created}
                if batch.started:
                    session.execute(
                        _TAG, [_tag_row(ids[s.key], self.tags[s.key]) for s in batch.started]
                    )
                if batch.finished:
                    rows = [
                        _token_row(ids[e.key], tokens.get(e.key) or self._tokens.get(e.key))
                        for e in batch.finished
                    ]
                    session.execute(_TOKENS, rows)
                return created

        created = retry_locked(attempt)
        # The caches change only after the commit, so a failed batch leaves them as they were.
        self._live.update(created)
        self.episode_ids.update(created)
        self._prompts.commit(self._live[e.key] for e in batch.finished if e.key in self._live)
        self._tokens.update(tokens)
        for e in batch.finished:
            self._live.pop(e.key, None)
            self._tokens.pop(e.key, None)


def _tag_row(episode_id: int, tag: GroupTag) -> dict[str, int]:
    return {"b_id": episode_id, "b_step": tag.train_step, "b_group": tag.group_index}


def _token_row(episode_id: int, tokens: _Tokens | None) -> dict[str, Any]:
    tokens = tokens or _Tokens()
    return {"b_id": episode_id, "b_logprob": tokens.mean_logprob, "b_tokens": tokens.count}


# -- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainingStep:
    """One training step's rollouts, summed up as TRL logs them (and a few more)."""

    train_step: int
    episodes: int
    groups: int
    accuracy: float
    reward: float
    """Mean episode reward (TRL's `reward` when the reward function is the episode's reward)."""
    reward_std: float | None
    """Standard deviation of the step's episode rewards (TRL's `reward_std`)."""
    group_reward_std: float | None
    """Mean over groups of the rewards' standard deviation within each group."""
    frac_reward_zero_std: float
    """Share of groups whose episodes all got the same reward: no learning signal."""
    unparsed_rate: float | None
    """Share of steps whose output had no action line."""
    mean_steps: float
    mean_logprob: float | None
    """Mean log-probability of the model's tokens (token-weighted)."""
    mean_tokens: float | None
    """Model tokens per episode (TRL's `completions/mean_length` counts these)."""


@dataclass(frozen=True, slots=True)
class TrainingEpisode:
    """One episode of a question within a training run."""

    id: int
    train_step: int
    group_index: int
    sample_index: int
    outcome: Outcome | None
    reward: float | None
    steps: int


@dataclass(frozen=True, slots=True)
class TrainingQuestion:
    """A question a training run played, with how it went over the run."""

    question_id: str
    question: str
    episodes: int
    correct: int
    first_step: int
    last_step: int


@dataclass(slots=True)
class Counters:
    """Where a training run's numbering goes on (a run continued after a restart)."""

    next_sample: dict[str, int] = field(default_factory=dict)
    """Per question, the next free sample index."""
    next_group: int = 0


def training_steps(store: Store, run_id: int) -> list[TrainingStep]:
    """The run's finished episodes, per training step, in step order (one indexed query)."""
    e = Episode
    correct = func.sum(case((e.outcome == "correct", 1), else_=0))
    stmt = (
        select(
            e.train_step,
            e.group_index,
            func.count(),
            correct,
            func.sum(e.reward),
            func.sum(e.reward * e.reward),
            func.max(e.reward) - func.min(e.reward),
            func.sum(e.steps),
            func.sum(e.unparsed_steps),
            func.sum(e.mean_logprob * e.tokens_out),
            func.sum(case((e.mean_logprob.is_not(None), e.tokens_out), else_=0)),
            func.sum(e.tokens_out),
            func.count(e.tokens_out),
        )
        .where(e.run_id == run_id, e.outcome.is_not(None), e.train_step.is_not(None))
        .group_by(e.train_step, e.group_index)
        .order_by(e.train_step, e.group_index)
    )
    with Session(store._engine) as session:
        rows = session.execute(stmt).all()
    by_step: dict[int, list[Any]] = {}
    for row in rows:
        by_step.setdefault(int(row[0]), []).append(row)
    return [_step_metrics(step, groups) for step, groups in by_step.items()]


def _step_metrics(step: int, groups: list[Any]) -> TrainingStep:
    n = sum(int(g[2]) for g in groups)
    total = sum(float(g[4] or 0.0) for g in groups)
    squares = sum(float(g[5] or 0.0) for g in groups)
    stds = [_std(int(g[2]), float(g[4] or 0.0), float(g[5] or 0.0)) for g in groups]
    group_stds = [s for s in stds if s is not None]
    steps = sum(int(g[7] or 0) for g in groups)
    unparsed = sum(int(g[8] or 0) for g in groups)
    logprob_sum = sum(float(g[9] or 0.0) for g in groups)
    scored = sum(int(g[10] or 0) for g in groups)
    tokens = sum(int(g[11] or 0) for g in groups)
    with_tokens = sum(int(g[12] or 0) for g in groups)
    return TrainingStep(
        train_step=step,
        episodes=n,
        groups=len(groups),
        accuracy=sum(int(g[3] or 0) for g in groups) / n,
        reward=total / n,
        reward_std=_std(n, total, squares),
        group_reward_std=sum(group_stds) / len(group_stds) if group_stds else None,
        frac_reward_zero_std=sum(1 for g in groups if float(g[6] or 0.0) < ZERO_STD) / len(groups),
        unparsed_rate=unparsed / steps if steps else None,
        mean_steps=steps / n,
        mean_logprob=logprob_sum / scored if scored else None,
        mean_tokens=tokens / with_tokens if with_tokens else None,
    )


def _std(n: int, total: float, squares: float) -> float | None:
    """Sample standard deviation from the count, sum and sum of squares (None below 2)."""
    if n < 2:
        return None
    return math.sqrt(max(0.0, (squares - total * total / n) / (n - 1)))


def training_questions(store: Store, run_id: int, *, limit: int = 5000) -> list[TrainingQuestion]:
    """The questions a training run played, most played first."""
    e = Episode
    correct = func.sum(case((e.outcome == "correct", 1), else_=0))
    stmt = (
        select(
            e.question_id,
            func.min(e.question),
            func.count(),
            correct,
            func.min(e.train_step),
            func.max(e.train_step),
        )
        .where(e.run_id == run_id, e.outcome.is_not(None), e.train_step.is_not(None))
        .group_by(e.question_id)
        .order_by(func.count().desc(), e.question_id)
        .limit(literal_limit(limit))
    )
    with Session(store._engine) as session:
        return [
            TrainingQuestion(q, text, int(n), int(c or 0), int(first), int(last))
            for q, text, n, c, first, last in session.execute(stmt)
        ]


def question_episodes(store: Store, run_id: int, question_id: str) -> list[TrainingEpisode]:
    """A question's finished episodes over a training run, in training order."""
    e = Episode
    stmt = (
        select(e.id, e.train_step, e.group_index, e.sample_index, e.outcome, e.reward, e.steps)
        .where(
            e.run_id == run_id,
            e.question_id == question_id,
            e.outcome.is_not(None),
            e.train_step.is_not(None),
        )
        .order_by(e.train_step, e.group_index, e.sample_index)
    )
    with Session(store._engine) as session:
        return [
            TrainingEpisode(
                r.id,
                int(r.train_step or 0),
                int(r.group_index or 0),
                r.sample_index,
                cast(Outcome | None, r.outcome),
                r.reward,
                r.steps,
            )
            for r in session.execute(stmt)
        ]


def counters(store: Store, run_id: int) -> Counters:
    """The next sample index of every question and the next group index of a run."""
    e = Episode
    with Session(store._engine) as session:
        samples = session.execute(
            select(e.question_id, func.max(e.sample_index))
            .where(e.run_id == run_id)
            .group_by(e.question_id)
        ).all()
        group = session.scalar(select(func.max(e.group_index)).where(e.run_id == run_id))
    return Counters(
        next_sample={q: int(s) + 1 for q, s in samples},
        next_group=0 if group is None else int(group) + 1,
    )
