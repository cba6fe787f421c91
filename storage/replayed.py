"""Episodes a later play of their training step replaced, in a run that keeps both plays: an
import's rows that a rewrite of their step file dropped (`episode_sources.gone_file_id`), and
a trainer's episodes of the steps it played again after resuming from a checkpoint
(`replayed_episodes`). The Training page, a training step as a side, and GRPO groups' step
figures read a step as its latest play; the run's other views keep both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    insert,
    literal,
    select,
    union_all,
)
from sqlalchemy.orm import Session

from storage.imports import gone_episodes
from storage.models import Episode, EpisodeSource, ReplayedEpisode

_CHUNK = 500  # ids bound in one IN (a page of episodes is far fewer)


def replaced_episodes(run_id: int) -> CompoundSelect[Any]:
    """The ids of the run's episodes a later play of their step replaced (read from the few
    marked rows' indexes)."""
    replayed = select(ReplayedEpisode.episode_id).where(ReplayedEpisode.run_id == run_id)
    return union_all(gone_episodes(run_id), replayed)


def latest_play(run_id: int) -> ColumnElement[bool]:
    """WHERE term on a run's episodes: the episode is of its step's latest play (every
    episode of a run whose steps were played once)."""
    # Not correlated: the few replaced rows are read once, and a run's episodes stay read
    # from the index a query would use without it.
    return Episode.id.not_in(replaced_episodes(run_id))


def mark_replayed(session: Session, run_id: int, resumed_at_step: int) -> int:
    """Mark the run's episodes of `resumed_at_step` and later (not marked yet) as replaced by
    the play of a trainer resumed there; returns how many were marked."""
    e = Episode
    to_mark = select(e.id, e.run_id, literal(resumed_at_step)).where(
        e.run_id == run_id,
        e.train_step >= resumed_at_step,
        e.id.not_in(select(ReplayedEpisode.episode_id).where(ReplayedEpisode.run_id == run_id)),
    )
    marked = (
        insert(ReplayedEpisode)
        .from_select(["episode_id", "run_id", "resumed_at_step"], to_mark)
        .returning(ReplayedEpisode.episode_id)
    )
    return len(session.execute(marked).all())


def replaced_among(session: Session, episode_ids: Sequence[int]) -> frozenset[int]:
    """Those of these episodes that a later play of their training step replaced."""
    found: set[int] = set()
    for at in range(0, len(episode_ids), _CHUNK):
        chunk = episode_ids[at : at + _CHUNK]
        gone = select(EpisodeSource.episode_id).where(
            EpisodeSource.episode_id.in_(chunk), EpisodeSource.gone_file_id.is_not(None)
        )
        replayed = select(ReplayedEpisode.episode_id).where(ReplayedEpisode.episode_id.in_(chunk))
        found.update(session.scalars(union_all(gone, replayed)))
    return frozenset(found)
