"""GRPO groups in SQL: per-group reward aggregates of a run, and one group's members.

What names a group lives here alone (`key_columns`, `key_of`, `key_conditions`): in a batch
run, the samples of one question; in a training run (its episodes carry `train_step`), the
samples of one question at one training step: those the trainer numbered (`group_index`) by
their number, the others by the step alone, and those without a step a group of their own.
Pooling a training run's samples of a question over all its steps hid the groups GRPO learned
nothing from: a question all right at step 1 and all wrong at step 9 looked like a group with
signal.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, literal, null, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from rollout_core import grpo
from storage import float_sums
from storage.float_sums import float_sum
from storage.models import Episode
from storage.read_models import GroupKey, GroupOverview, GroupStats


def is_training_run(session: Session, run_id: int) -> bool:
    """Whether the run's episodes carry training groups (one probe of the training index)."""
    probe = select(Episode.id).where(Episode.run_id == run_id, Episode.train_step.is_not(None))
    return session.scalar(probe.limit(1)) is not None


def key_columns(training: bool) -> tuple[InstrumentedAttribute[Any], ...]:
    """The episode columns that, within a run, name a group, in the order of the index that
    groups them: (run_id, question_id, ...) for a batch run, the training index otherwise."""
    if training:
        return (Episode.train_step, Episode.group_index, Episode.question_id)
    return (Episode.question_id,)


def key_of(values: Sequence[Any]) -> GroupKey:
    """The GroupKey of a row's `key_columns()` values."""
    if len(values) == 1:
        return GroupKey(str(values[0]))
    train_step, group_index, question_id = values
    return GroupKey(
        str(question_id),
        None if group_index is None else int(group_index),
        None if train_step is None else int(train_step),
    )


def key_conditions(key: GroupKey, training: bool) -> list[ColumnElement[bool]]:
    """WHERE terms selecting one group's episodes (with the run's), as `key_columns` groups
    them: a numbered group by its number; in a training run (`is_training_run`), a group
    without one by its training step too, a key without a step matching the episodes
    without one; in a batch run, the question's samples."""
    question = Episode.question_id == key.question_id
    if key.group_index is not None:
        return [question, Episode.group_index == key.group_index]
    if not training:
        return [question]
    step = key.train_step
    at = Episode.train_step.is_(None) if step is None else Episode.train_step == step
    return [question, at, Episode.group_index.is_(None)]


STD_BIN = 0.05
"""Width of the bins `GroupOverview.std_counts` counts the groups' reward std in, where the
rewards are of ordinary size (`std_bin_width`)."""
STD_BINS = 40
"""About the most bins a wider spread of stds is counted in (`std_bin_width`)."""


def std_bin_width(largest: float) -> float:
    """The width of the std bins, from 0, for groups whose largest std is `largest`: STD_BIN
    while that takes at most STD_BINS bins, else the least round width (1, 2 or 5 times a power
    of ten) that keeps to them: a std of millions in bins of 0.05 is a list of tens of millions."""
    if largest < STD_BINS * STD_BIN:
        return STD_BIN
    least = largest / STD_BINS
    power = 10.0 ** math.floor(math.log10(least))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= least)


def overview(
    session: Session,
    run_id: int,
    *,
    limit: int,
    question: str | None = None,
    min_train_step: int | None = None,
    max_train_step: int | None = None,
) -> GroupOverview:
    """A run's groups summed up (counted by where their spread comes from, and the std
    histogram), with the groups it lists: the `limit` of highest reward std (ties by question,
    then a training run's steps in number order), or every group of `question`; no question
    texts (`question_texts`). A training run's groups can be those of a range of training
    steps (either end inclusive, None for open); a run without training steps has none there.

    One GROUP BY that reads one index alone (`stats_query`); the summary is counted in one
    pass over its rows, and a record made only for the groups listed: a long training run has
    tens of thousands of groups, and the dashboard's cache copies what it holds at every visit.
    """
    training = is_training_run(session, run_id)

    def query(exact: bool) -> Select[Any]:
        found = stats_query(run_id, training, exact=exact)
        if min_train_step is not None:
            found = found.where(Episode.train_step >= min_train_step)
        if max_train_step is not None:
            found = found.where(Episode.train_step <= max_train_step)
        return found

    # On the connection: a row per group, which the ORM would handle one by one for nothing.
    rows = float_sums.rows(session, query)
    k = len(key_columns(training))
    qid_at = k - 1  # the question is the last key column
    source_of = grpo.signal_source
    total = episodes = largest = none_correct = all_correct = judged = 0
    by_source = dict.fromkeys(grpo.SIGNAL_SOURCES, 0)
    spread: list[tuple[grpo.SignalSource, float]] = []
    beyond: dict[grpo.SignalSource, int] = {"correctness": 0, "shaping only": 0}
    ranked: list[tuple[float, str, int, int, int]] = []
    for i, row in enumerate(rows):
        n, sum_, sum_sq, lowest, highest, n_correct, reported, largest_advantage = row[k:]
        n_correct = n_correct or 0
        std = grpo.std_from_sums(n, sum_ or 0.0, sum_sq or 0.0, lowest or 0.0, highest or 0.0)
        advantage = trainer_advantage(n, reported, largest_advantage)
        source = source_of(n, n_correct, std, advantage)
        judged += advantage is not None
        total += 1
        episodes += n
        largest = max(largest, n)
        by_source[source] += 1
        none_correct += not n_correct
        all_correct += n_correct == n
        if source != "none" and math.isfinite(std):
            spread.append((source, std))
        elif source != "none":
            beyond[source] += 1
        qid = row[qid_at]
        if question is None or qid == question:
            step, group = (row[0] or 0, row[1] or 0) if training else (0, 0)
            ranked.append((-std, qid, step, group, i))
    width = std_bin_width(max((std for _, std in spread), default=0.0))
    bins: dict[grpo.SignalSource, list[int]] = {"correctness": [], "shaping only": []}
    for source, std in spread:
        # The bin std falls in (the tiny offset keeps 0.15 out of the 0.10-0.15 bin).
        b = int(std / width + 1e-9)
        counts = bins[source]
        if b >= len(counts):
            counts.extend([0] * (b + 1 - len(counts)))
        counts[b] += 1
    chosen = heapq.nsmallest(limit, ranked) if question is None else sorted(ranked)
    return GroupOverview(
        run_id=run_id,
        groups=[_stats(run_id, rows[i], k) for *_, i in chosen],
        questions={},
        total=total,
        by_source=by_source,
        none_correct=none_correct,
        all_correct=all_correct,
        episodes=episodes,
        largest=largest,
        std_counts={source: tuple(counts) for source, counts in bins.items()},
        std_bin=width,
        std_beyond=beyond,
        trainer_judged=judged,
    )


def _stats(run_id: int, row: Sequence[Any], k: int) -> GroupStats:
    """A group's record from its `stats_query` row (`k` key columns first)."""
    n, total, total_sq, lowest, highest, n_correct, reported, largest_advantage = row[k:]
    n, total, total_sq = int(n), float(total or 0.0), float(total_sq or 0.0)
    lowest, highest = float(lowest or 0.0), float(highest or 0.0)
    std = grpo.std_from_sums(n, total, total_sq, lowest, highest)
    return GroupStats(
        run_id,
        key_of(row[:k]),
        n,
        int(n_correct or 0),
        total / n,
        std,
        lowest,
        highest,
        trainer_advantage(n, reported, largest_advantage),
    )


def trainer_advantage(n: int, reported: int | None, largest: float | None) -> float | None:
    """A group's largest |advantage| from the trainer, where it reported one for each of the
    group's `n` samples (`reported` of them); None where it did not."""
    return float(largest) if reported == n and largest is not None else None


def advantage_columns(training: bool) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """How many of a group's samples carry the trainer's advantage, and the largest
    |advantage|. A training run's are on its training index; a batch run has no trainer (a
    Recorder's advantages come with training steps), and reading them there would take its
    GROUP BY off its own index to every episode's row."""
    if not training:
        return literal(0), null()
    return func.count(Episode.trainer_advantage), func.max(func.abs(Episode.trainer_advantage))


def stats_query(run_id: int, training: bool, *, exact: bool = False) -> Select[Any]:
    """The GROUP BY of `overview`: a run's groups, `key_columns` first, then count, sum,
    sum of squares, min and max of the rewards, the correct episodes, and the trainer's
    advantages (`advantage_columns`); `exact`: the sums as `float_sums.float_sum` makes them."""
    cols = key_columns(training)
    correct = func.sum(case((Episode.outcome == "correct", 1), else_=0))
    return (
        select(
            *cols,
            func.count(),
            float_sum(Episode.reward, exact=exact),
            float_sum(Episode.reward, Episode.reward, exact=exact),
            func.min(Episode.reward),
            func.max(Episode.reward),
            correct,
            *advantage_columns(training),
        )
        .where(Episode.run_id == run_id, Episode.outcome.is_not(None))
        .group_by(*cols)
    )


def stats_of(
    run_id: int,
    key: GroupKey,
    rewards: Sequence[float],
    correct: int,
    advantages: Sequence[float | None] = (),
) -> GroupStats:
    """A group's statistics from its members' rewards (and the trainer's `advantages` of
    them, None where it reported none)."""
    reported = [abs(a) for a in advantages if a is not None]
    return GroupStats(
        run_id=run_id,
        key=key,
        size=len(rewards),
        correct=correct,
        mean=grpo.group_mean(rewards),
        std=grpo.group_std(rewards),
        lowest=min(rewards),
        highest=max(rewards),
        trainer_advantage=trainer_advantage(
            len(rewards), len(reported), max(reported, default=None)
        ),
    )


def members(
    session: Session, run_id: int, key: GroupKey
) -> tuple[GroupKey, list[tuple[int, float, bool]]]:
    """The key with its training step filled in, and (episode id, reward, correct) of the
    group's finished episodes, by sample index."""
    training = is_training_run(session, run_id)
    rows = session.execute(
        select(Episode.id, Episode.reward, Episode.outcome, Episode.train_step)
        .where(
            Episode.run_id == run_id,
            Episode.outcome.is_not(None),
            *key_conditions(key, training),
        )
        .order_by(Episode.sample_index)
    ).all()
    if rows and key.group_index is not None and rows[0].train_step is not None:
        key = GroupKey(key.question_id, key.group_index, int(rows[0].train_step))
    return key, [(int(i), float(r or 0.0), o == "correct") for i, r, o, _ in rows]


def size(session: Session, run_id: int, key: GroupKey) -> int:
    """How many finished episodes the group has (`members` without reading them)."""
    training = is_training_run(session, run_id)
    counted = select(func.count()).where(
        Episode.run_id == run_id, Episode.outcome.is_not(None), *key_conditions(key, training)
    )
    return int(session.scalar(counted) or 0)


def question_texts(session: Session, run_id: int, question_ids: Sequence[str]) -> dict[str, str]:
    """Question id -> text, for some questions of a run: the text of each question's first
    episode (every episode of a question has its text). Its id comes from the run's index of
    questions alone, where the least text over the question's episodes would read every one
    of their rows."""
    out: dict[str, str] = {}
    ids = list(question_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        first = (
            select(func.min(Episode.id))
            .where(Episode.run_id == run_id, Episode.question_id.in_(chunk))
            .group_by(Episode.question_id)
        )
        rows = session.execute(
            select(Episode.question_id, Episode.question).where(Episode.id.in_(first))
        )
        out.update({str(q): str(text) for q, text in rows})
    return out
