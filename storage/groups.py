"""GRPO groups in SQL: per-group reward aggregates of a run, and one group's members.

What names a group lives here alone (`key_columns`, `key_of`, `key_conditions`): the samples
of one question in a run. A training run's groups are (training step, question); adding the
step to these three functions and to `GroupKey` makes every group query follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from rollout_core import grpo
from storage.models import Episode
from storage.read_models import GroupKey, GroupStats


def key_columns() -> tuple[InstrumentedAttribute[Any], ...]:
    """The episode columns that, within a run, name a group."""
    return (Episode.question_id,)


def key_of(values: Sequence[Any]) -> GroupKey:
    """The GroupKey of a row's `key_columns()` values."""
    (question_id,) = values
    return GroupKey(str(question_id))


def key_conditions(key: GroupKey) -> list[ColumnElement[bool]]:
    """WHERE terms selecting one group's episodes (with the run's)."""
    return [Episode.question_id == key.question_id]


def group_stats(session: Session, run_id: int) -> list[GroupStats]:
    """Every group of a run with its reward statistics: one GROUP BY on the
    (run_id, question_id, outcome, reward) index; the standard deviation from the sums."""
    cols = key_columns()
    correct = func.sum(case((Episode.outcome == "correct", 1), else_=0))
    rows = session.execute(
        select(
            *cols,
            func.count(),
            func.sum(Episode.reward),
            func.sum(Episode.reward * Episode.reward),
            func.min(Episode.reward),
            func.max(Episode.reward),
            correct,
        )
        .where(Episode.run_id == run_id, Episode.outcome.is_not(None))
        .group_by(*cols)
    )
    k = len(cols)
    out = []
    for row in rows:
        n, total, total_sq, lowest, highest, n_correct = row[k:]
        n, total, total_sq = int(n), float(total or 0.0), float(total_sq or 0.0)
        lowest, highest = float(lowest or 0.0), float(highest or 0.0)
        out.append(
            GroupStats(
                run_id=run_id,
                key=key_of(row[:k]),
                size=n,
                correct=int(n_correct or 0),
                mean=total / n,
                std=grpo.std_from_sums(n, total, total_sq, lowest, highest),
                lowest=lowest,
                highest=highest,
            )
        )
    return out


def stats_of(run_id: int, key: GroupKey, rewards: Sequence[float], correct: int) -> GroupStats:
    """A group's statistics from its members' rewards."""
    return GroupStats(
        run_id=run_id,
        key=key,
        size=len(rewards),
        correct=correct,
        mean=grpo.group_mean(rewards),
        std=grpo.group_std(rewards),
        lowest=min(rewards),
        highest=max(rewards),
    )


def member_ids(session: Session, run_id: int, key: GroupKey) -> list[tuple[int, float, bool]]:
    """(episode id, reward, correct) of a group's finished episodes, by sample index."""
    rows = session.execute(
        select(Episode.id, Episode.reward, Episode.outcome)
        .where(Episode.run_id == run_id, Episode.outcome.is_not(None), *key_conditions(key))
        .order_by(Episode.sample_index)
    )
    return [(int(i), float(r or 0.0), o == "correct") for i, r, o in rows]


def question_texts(session: Session, run_id: int, question_ids: Sequence[str]) -> dict[str, str]:
    """Question id -> text, for some questions of a run (a probe of the run's index each)."""
    out: dict[str, str] = {}
    ids = list(question_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = session.execute(
            select(Episode.question_id, func.min(Episode.question))
            .where(Episode.run_id == run_id, Episode.question_id.in_(chunk))
            .group_by(Episode.question_id)
        )
        out.update({str(q): str(text) for q, text in rows})
    return out
