"""Cached Store reads of the Training page.

Keyed by the run's progress as well as its id: a finished run's reads stay cached a minute
(a long run's take a second or more), a training run's are read again once another episode
has finished. The progress comes from a run read uncached.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.dashboard.data import cached_read
from app.dashboard.training.curves import Curves, curves_of, named_reward_points
from app.dashboard.training.flips import Flips, flips_of
from storage import training
from storage.read_models import RunSummary
from storage.store import Store

_TTL = 60
_ENTRIES = 32
"""Entries per read at most: a live run leaves one behind at every refresh."""

Progress = tuple[str, int]
"""A run's (status, finished episodes)."""


def progress_of(run: RunSummary) -> Progress:
    """What a training run's cached reads are keyed by besides its id."""
    return run.status, run.episodes_finished


@dataclass(frozen=True, slots=True)
class StepsView:
    """What the page draws of a run's steps, and its questions that flipped: both from the
    run's steps, read once."""

    curves: Curves
    flips: Flips
    rewards: dict[str, list[float | None]]
    """Each named reward's mean at each of the curves' points (none for a run without them)."""


@cached_read(_TTL, max_entries=_ENTRIES)
def steps_view(store: Store, run_id: int, progress: Progress) -> StepsView:
    """A training run's per-step metrics, as many points as the page draws, with the
    questions each point's steps drew, and its named rewards at those points; and the
    questions whose result changed between the first and the last step that drew them.
    Reduced before caching: the cache copies what it holds at every visit, and a long run's
    steps name tens of thousands of groups."""
    steps = training.training_steps(store, run_id)
    flips = flips_of(steps)
    texts = training.question_texts(store, run_id, flips.question_ids)
    curves = curves_of(steps)
    named = named_reward_points(curves, training.named_reward_steps(store, run_id))
    return StepsView(curves, flips.with_texts(texts), named)


@cached_read(_TTL, max_entries=_ENTRIES)
def played_again(store: Store, run_id: int, progress: Progress) -> training.PlayedAgain:
    """The episodes of earlier plays of a training run's steps that a later play replaced."""
    return training.played_again(store, run_id)


@cached_read(_TTL, max_entries=_ENTRIES)
def questions(store: Store, run_id: int, progress: Progress) -> list[training.TrainingQuestion]:
    """The questions a training run played, most played first."""
    return training.training_questions(store, run_id)


@cached_read(_TTL, max_entries=_ENTRIES)
def played_steps(store: Store, run_id: int, question_id: str, progress: Progress) -> list[int]:
    """The training steps at which a question has a finished episode, in order."""
    return training.played_steps(store, run_id, question_id)


@cached_read(_TTL, max_entries=_ENTRIES)
def question_episodes(
    store: Store, run_id: int, question_id: str, steps: tuple[int, ...], progress: Progress
) -> list[training.TrainingEpisode]:
    """A question's episodes at some steps of a training run, in training order."""
    return training.question_episodes(store, run_id, question_id, list(steps))
