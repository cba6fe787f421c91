"""Failure classes of stored episodes, from the rows the store holds (rules and the classifier
itself: `rollout_core.failure_classes`).

Used where no runner classified an episode: a finished-episode record written without its
class, and the migration that back-fills the class of every episode already stored. Steps are
read only for episodes that ended without an answer (`needs_steps`), a few hundred at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rollout_core.failure_classes import (
    StepFacts,
    classify_episode,
    gold_seen_from_progress,
    needs_steps,
)
from rollout_core.records import FailureClass, Outcome

# The step columns the classifier reads, as they have been since the first schema.
_STEPS = sa.table(
    "steps",
    sa.column("episode_id", sa.Integer),
    sa.column("step_no", sa.Integer),
    sa.column("action", sa.String),
    sa.column("argument", sa.Text),
    sa.column("parsed", sa.Boolean),
    sa.column("error", sa.Text),
)
# SQLite allows 32766 bound parameters; a few hundred ids keep each IN list short anyway.
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Finished:
    """What classifying a stored episode needs besides its steps."""

    episode_id: int
    outcome: Outcome
    progress: float | None
    """The episode's progress reward: whether a QUERY returned the gold rows."""


def classify_stored(
    conn: sa.Connection | Session, episodes: Sequence[Finished]
) -> dict[int, FailureClass]:
    """episode id -> failure class, reading the steps of those that ended without an answer."""
    wanted = [e.episode_id for e in episodes if needs_steps(e.outcome)]
    steps = _step_facts(conn, wanted)
    return {
        e.episode_id: classify_episode(
            e.outcome, steps.get(e.episode_id, ()), gold_seen=gold_seen_from_progress(e.progress)
        )
        for e in episodes
    }


def _step_facts(
    conn: sa.Connection | Session, episode_ids: Sequence[int]
) -> dict[int, list[StepFacts]]:
    out: dict[int, list[StepFacts]] = {}
    s = _STEPS.c
    for chunk in _chunks(episode_ids):
        rows = conn.execute(
            sa.select(s.episode_id, s.action, s.argument, s.parsed, s.error)
            .where(s.episode_id.in_(chunk))
            .order_by(s.episode_id, s.step_no)
        )
        for episode_id, action, argument, parsed, error in rows:
            out.setdefault(episode_id, []).append(StepFacts(action, argument, bool(parsed), error))
    return out


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]
