"""What a trainer made of the episodes rollscope recorded for it: the advantage it gave each,
and its reward functions' values by name.

A trainer scores a rollout after rollscope has played and written it (TRL calls its reward
functions on what the rollout function returns), so these come as a second write, the next
time the trainer asks for rollouts or when training ends (`app.training.trainer_scores`).
They fill what an import of the trainer's files fills: `episodes.trainer_advantage` and the
episode's rows of `episode_rewards`; `episodes.reward` stays the environment's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from storage.models import Episode, EpisodeReward

_EPISODES = cast(Table, Episode.__table__)
_REWARDS = cast(Table, EpisodeReward.__table__)
_CHUNK = 500
"""Episode ids per IN list."""


@dataclass(frozen=True, slots=True)
class TrainerScore:
    """One recorded episode as its trainer scored it."""

    episode_id: int
    advantage: float
    rewards: Mapping[str, float]
    """Each reward function's value by the trainer's name for it; a function that gave the
    episode no value (None, NaN) is left out."""


def write(session: Session, run_id: int, scores: Sequence[TrainerScore]) -> int:
    """Set each episode's trainer advantage and named rewards (replacing any it had); scores
    of episodes that are not the run's are dropped. Returns how many episodes were scored."""
    connection = session.connection()
    ids = [s.episode_id for s in scores]
    mine: set[int] = set()
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        mine.update(
            connection.scalars(
                select(_EPISODES.c.id).where(
                    _EPISODES.c.id.in_(chunk), _EPISODES.c.run_id == run_id
                )
            )
        )
    scored = [s for s in scores if s.episode_id in mine]
    if not scored:
        return 0
    connection.execute(
        update(_EPISODES)
        .where(_EPISODES.c.id == bindparam("eid"))
        .values(trainer_advantage=bindparam("advantage")),
        [{"eid": s.episode_id, "advantage": float(s.advantage)} for s in scored],
    )
    kept = sorted(mine)
    for start in range(0, len(kept), _CHUNK):
        connection.execute(
            delete(_REWARDS).where(_REWARDS.c.episode_id.in_(kept[start : start + _CHUNK]))
        )
    rows = [
        {"episode_id": s.episode_id, "name": name, "value": float(value)}
        for s in scored
        for name, value in s.rewards.items()
        if value is not None and math.isfinite(value)
    ]
    if rows:
        connection.execute(insert(_REWARDS), rows)
    return len(scored)
