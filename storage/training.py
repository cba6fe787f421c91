"""Training runs in the store: the reads of the Training page.

A training run's episodes are keyed like any other, (question_id, sample_index), with
`sample_index` counting a question's episodes over the whole run; `train_step` (the trainer's
global step when the episode was played) and `group_index` (the GRPO group, numbered over the
run) say where in training each one belongs.

A trainer resumed from a checkpoint plays the steps after it again. A step is read here as
its latest play: the episodes of an earlier one (a trainer's, marked when it resumed; an
import's rows a rewrite of the step file dropped: `storage.replayed`) are left out
(`played_again` counts them); the run keeps them for its other views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    case,
    func,
    literal_column,
    select,
)
from sqlalchemy.orm import Session

from rollout_core import grpo
from rollout_core.records import Outcome
from storage import float_sums, groups, run_totals
from storage.float_sums import float_sum
from storage.models import Episode, EpisodeReward
from storage.read_models import GroupKey, RunSummary
from storage.replayed import latest_play, replaced_episodes
from storage.sql_limits import literal_limit
from storage.store import Store

_EPISODES = cast(Table, Episode.__table__)

ZERO_STD = 1e-8
"""A group whose rewards spread less than this has no learning signal (TRL's `isclose` to 0)."""


# -- reads ------------------------------------------------------------------------------------


class DrawnQuestion(NamedTuple):
    """A question a training step drew: its samples there, and how many were correct."""

    question_id: str
    correct: int
    episodes: int


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
    """Share of groups whose episodes all got the same reward, or, where the trainer reported
    its advantages, got advantage 0 from it: no learning signal."""
    unparsed_rate: float | None
    """Share of steps whose output had no action line."""
    mean_steps: float
    mean_logprob: float | None
    """Mean log-probability of the model's tokens: token-weighted, or the mean of the
    episodes' where some of them do not say how many tokens they have."""
    mean_tokens: float | None
    """Model tokens per episode (TRL's `completions/mean_length` counts these)."""
    by_source: dict[grpo.SignalSource, int] = field(
        default_factory=lambda: dict.fromkeys(grpo.SIGNAL_SOURCES, 0)
    )
    """The step's groups by where their reward spread comes from (`grpo.signal_source`)."""
    drawn: tuple[DrawnQuestion, ...] = ()
    """The questions the step drew, in the order of their groups (a question's groups at the
    step counted together)."""


class NamedRewardStep(NamedTuple):
    """One named reward (a trainer's reward function, a file's reward column) at one training
    step: its sum over the step's finished episodes that have it, and their number."""

    train_step: int
    name: str
    total: float
    episodes: int


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
    """The run's finished episodes, per training step, in step order, with the questions each
    step drew and its groups counted by source (one indexed query, a row per group)."""
    with Session(store._engine) as session:
        # On the connection: a row per group, and the ORM's handling of each costs more than
        # the query's own.
        rows = float_sums.rows(session, lambda exact: steps_query(run_id, exact=exact))
    out: list[TrainingStep] = []
    sums: _StepSums | None = None
    for row in rows:  # in step order: a step's groups are consecutive
        if sums is None or row[0] != sums.step:
            if sums is not None:
                out.append(sums.metrics())
            sums = _StepSums(int(row[0]))
        sums.add(row)
    if sums is not None:
        out.append(sums.metrics())
    return out


def named_reward_steps(store: Store, run_id: int) -> list[NamedRewardStep]:
    """Each named reward's sum per training step over the run's finished episodes, in step
    and name order (TRL logs their means as `rewards/<name>/mean`)."""
    e, r = Episode, EpisodeReward

    def query(exact: bool) -> Select[Any]:
        return (
            select(e.train_step, r.name, float_sum(r.value, exact=exact), func.count())
            .join(r, r.episode_id == e.id)
            .where(
                e.run_id == run_id,
                e.outcome.is_not(None),
                e.train_step.is_not(None),
                latest_play(run_id),
            )
            .group_by(e.train_step, r.name)
            .order_by(e.train_step, r.name)
        )

    with Session(store._engine) as session:
        rows = float_sums.rows(session, query)
    # train_step is never NULL here: the WHERE leaves those out.
    return [NamedRewardStep(cast(int, s), name, float(total), n) for s, name, total, n in rows]


def steps_query(run_id: int, *, exact: bool = False) -> Select[Any]:
    """`training_steps`' GROUP BY: a row per group, keyed as `storage.groups` keys a training
    run's groups and in the training index's order, with the sums of its episodes (`exact`:
    the float sums as `float_sums.float_sum` makes them)."""
    e = Episode
    correct = func.sum(case((e.outcome == "correct", 1), else_=0))
    key = groups.key_columns(training=True)
    return (
        select(
            *key,
            func.count(),
            correct,
            float_sum(e.reward, exact=exact),
            float_sum(e.reward, e.reward, exact=exact),
            func.min(e.reward),
            func.max(e.reward),
            func.sum(e.steps),
            func.sum(e.unparsed_steps),
            float_sum(e.mean_logprob, e.tokens_out, exact=exact),
            func.sum(case((e.mean_logprob.is_not(None), e.tokens_out), else_=0)),
            float_sum(e.mean_logprob, exact=exact),
            func.count(e.mean_logprob),
            func.count(case((e.tokens_out.is_not(None), e.mean_logprob))),
            func.sum(e.tokens_out),
            func.count(e.tokens_out),
            *groups.advantage_columns(training=True),
        )
        .where(
            e.run_id == run_id,
            e.outcome.is_not(None),
            e.train_step.is_not(None),
            latest_play(run_id),
        )
        .group_by(*key)
        .order_by(*key)
    )


class _StepSums:
    """One training step's sums over its groups, added a group's row at a time (one pass,
    instead of a dozen sums over each step's list of groups)."""

    __slots__ = (
        "by_source",
        "correct",
        "drawn",
        "flat",
        "groups",
        "highest",
        "logprob",
        "logprob_episodes",
        "logprob_sum",
        "logprob_weighed",
        "lowest",
        "n",
        "scored",
        "squares",
        "std_sum",
        "stds",
        "step",
        "steps",
        "tokens",
        "total",
        "unparsed",
        "with_tokens",
    )

    def __init__(self, step: int) -> None:
        self.step = step
        self.groups = self.n = self.correct = self.stds = self.flat = 0
        self.steps = self.unparsed = self.scored = self.tokens = self.with_tokens = 0
        self.total = self.squares = self.std_sum = self.logprob = self.logprob_sum = 0.0
        self.logprob_episodes = self.logprob_weighed = 0
        self.lowest, self.highest = math.inf, -math.inf
        self.by_source = dict.fromkeys(grpo.SIGNAL_SOURCES, 0)
        self.drawn: dict[str, DrawnQuestion] = {}

    def add(self, row: Sequence[Any]) -> None:
        """A group's row of `training_steps`' query."""
        _, _, question, n, correct, total, squares, lowest, highest, *rest = row
        correct, total, squares = correct or 0, total or 0.0, squares or 0.0
        lowest, highest = lowest or 0.0, highest or 0.0
        self.groups += 1
        self.n += n
        self.correct += correct
        self.total += total
        self.squares += squares
        self.lowest, self.highest = min(self.lowest, lowest), max(self.highest, highest)
        std = grpo.std_from_sums(n, total, squares, lowest, highest)
        if n > 1:  # a group of one has no std (TRL's is NaN): left out of the mean
            self.stds += 1
            self.std_sum += std
        steps, unparsed, logprob, scored, logprob_sum, logprob_n, weighed, *rest = rest
        tokens, with_tokens, reported, largest = rest
        advantage = groups.trainer_advantage(n, reported, largest)
        source = grpo.signal_source(n, correct, std, advantage)
        self.by_source[source] += 1
        # As TRL counts it, from the reward it trained on: its advantages say, where known.
        self.flat += highest - lowest < ZERO_STD if advantage is None else source == "none"
        seen = self.drawn.get(question)
        if seen is not None:  # two groups of one question at this step: counted together
            correct, n = correct + seen.correct, n + seen.episodes
        self.drawn[question] = DrawnQuestion(question, correct, n)
        self.steps += steps or 0
        self.unparsed += unparsed or 0
        self.logprob += logprob or 0.0
        self.scored += scored or 0
        self.logprob_sum += logprob_sum or 0.0
        self.logprob_episodes += logprob_n
        self.logprob_weighed += weighed
        self.tokens += tokens or 0
        self.with_tokens += with_tokens or 0

    def metrics(self) -> TrainingStep:
        n = self.n
        return TrainingStep(
            train_step=self.step,
            episodes=n,
            groups=self.groups,
            accuracy=self.correct / n,
            reward=self.total / n,
            # As a group's: 0 for equal rewards, inf where the sums overflow a float.
            reward_std=(
                grpo.std_from_sums(n, self.total, self.squares, self.lowest, self.highest)
                if n > 1
                else None
            ),
            group_reward_std=self.std_sum / self.stds if self.stds else None,
            frac_reward_zero_std=self.flat / self.groups,
            unparsed_rate=self.unparsed / self.steps if self.steps else None,
            mean_steps=self.steps / n,
            mean_logprob=self._mean_logprob(),
            mean_tokens=self.tokens / self.with_tokens if self.with_tokens else None,
            by_source=self.by_source,
            drawn=tuple(self.drawn.values()),
        )

    def _mean_logprob(self) -> float | None:
        """Token-weighted where every episode with a log-prob has its token count (a loop's
        Recorder may give the mean alone); else the episodes' mean."""
        if self.logprob_weighed == self.logprob_episodes and self.scored:
            return self.logprob / self.scored
        return self.logprob_sum / self.logprob_episodes if self.logprob_episodes else None


def training_questions(store: Store, run_id: int, *, limit: int = 5000) -> list[TrainingQuestion]:
    """The questions a training run played, most played first."""
    with Session(store._engine) as session:
        rows = session.connection().execute(questions_query(run_id, limit)).all()
        texts = groups.question_texts(session, run_id, [str(r[0]) for r in rows])
    return [
        TrainingQuestion(q, texts.get(q, ""), int(n), int(c or 0), int(first), int(last))
        for q, n, c, first, last in rows
    ]


def questions_query(run_id: int, limit: int) -> Select[Any]:
    """`training_questions`' GROUP BY: (question id, episodes, correct, first and last step)."""
    e = Episode
    correct = func.sum(case((e.outcome == "correct", 1), else_=0))
    # Grouped by an expression, not the column: grouped by the column, SQLite reads the run's
    # questions in order from their index and every episode's row for its training step; this
    # way it reads the training index alone.
    question = e.question_id.concat(literal_column("''"))
    counts: list[ColumnElement[Any]] = [
        func.count(),
        correct,
        func.min(e.train_step),
        func.max(e.train_step),
    ]
    return (
        select(question, *counts)
        .where(
            e.run_id == run_id,
            e.outcome.is_not(None),
            e.train_step.is_not(None),
            latest_play(run_id),
        )
        .group_by(question)
        .order_by(func.count().desc(), question)
        .limit(literal_limit(limit))
    )


def question_texts(store: Store, run_id: int, question_ids: Sequence[str]) -> dict[str, str]:
    """Question id -> text, for some questions of a training run."""
    with Session(store._engine) as session:
        return groups.question_texts(session, run_id, question_ids)


def played_steps(store: Store, run_id: int, question_id: str) -> list[int]:
    """The training steps at which a question has a finished episode, in order."""
    e = Episode
    stmt = (
        select(e.train_step)
        .where(*_finished_of(run_id, question_id))
        .distinct()
        .order_by(e.train_step)
    )
    with Session(store._engine) as session:
        return [int(step) for step in session.scalars(stmt) if step is not None]


def finished_steps(store: Store, run_id: int) -> list[int]:
    """The training steps at which the run has a finished episode, in order (read from the
    training index)."""
    e = Episode
    stmt = (
        select(e.train_step)
        .where(
            e.run_id == run_id,
            e.train_step.is_not(None),
            e.outcome.is_not(None),
            latest_play(run_id),
        )
        .distinct()
        .order_by(e.train_step)
    )
    with Session(store._engine) as session:
        return [int(step) for step in session.scalars(stmt) if step is not None]


def run_at_step(store: Store, run: RunSummary, step: int) -> RunSummary:
    """The run with the figures of one training step's episodes in place of the whole run's
    (episodes, accuracy, reward, steps, parse failures), its `train_step` set: a side of
    Compare. Counted as the write path counts a run's (`run_totals`)."""
    with Session(store._engine) as session:
        scope = [Episode.run_id == run.id, Episode.train_step == step, latest_play(run.id)]
        t = run_totals.counted(session.connection(), scope).totals
    finished, steps = int(t["finished_episodes"]), int(t["step_sum"])
    return replace(
        run,
        train_step=step,
        episodes_planned=finished,
        episodes_finished=finished,
        correct=int(t["correct_episodes"]),
        errors=int(t["error_episodes"]),
        accuracy=t["correct_episodes"] / finished if finished else None,
        mean_reward=t["reward_sum"] / finished if finished else None,
        mean_steps=t["finished_step_sum"] / finished if finished else None,
        parse_failure_rate=t["unparsed_sum"] / steps if steps else None,
    )


def question_episodes(
    store: Store, run_id: int, question_id: str, steps: Sequence[int] | None = None
) -> list[TrainingEpisode]:
    """A question's finished episodes over a training run (at these `steps` only, when
    given), in training order."""
    e = Episode
    where = _finished_of(run_id, question_id)
    if steps is not None:
        where.append(e.train_step.in_(list(steps)))
    stmt = (
        select(e.id, e.train_step, e.group_index, e.sample_index, e.outcome, e.reward, e.steps)
        .where(*where)
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


def _finished_of(run_id: int, question_id: str) -> list[ColumnElement[bool]]:
    """WHERE terms for a question's finished episodes in a training run."""
    e = Episode
    return [
        e.run_id == run_id,
        e.question_id == question_id,
        e.outcome.is_not(None),
        e.train_step.is_not(None),
        latest_play(run_id),
    ]


@dataclass(frozen=True, slots=True)
class PlayedAgain:
    """The episodes of a training run's earlier plays of steps that a later play replaced."""

    by_step: dict[int, int] = field(default_factory=dict)
    """training step -> such episodes, in step order."""

    @property
    def episodes(self) -> int:
        return sum(self.by_step.values())

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(self.by_step)


def played_again(store: Store, run_id: int) -> PlayedAgain:
    """What `latest_play` leaves out of a training run, by step."""
    e = Episode
    stmt = (
        select(e.train_step, func.count())
        .where(e.id.in_(replaced_episodes(run_id)), e.train_step.is_not(None))
        .group_by(e.train_step)
        .order_by(e.train_step)
    )
    with Session(store._engine) as session:
        return PlayedAgain({int(step or 0): int(n) for step, n in session.execute(stmt)})


def replaced_groups(store: Store, run_id: int) -> dict[GroupKey, int]:
    """A training run's groups that hold episodes a later play of their step replaced, with
    how many (a group of an earlier play: all its samples, unless an import's new play wrote
    some of them again byte for byte)."""
    e = Episode
    key = groups.key_columns(training=True)
    stmt = (
        select(*key, func.count())
        .where(e.id.in_(replaced_episodes(run_id)), e.outcome.is_not(None))
        .group_by(*key)
    )
    with Session(store._engine) as session:
        return {groups.key_of(row[:-1]): int(row[-1]) for row in session.execute(stmt)}


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
