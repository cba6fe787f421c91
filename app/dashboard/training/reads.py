"""Cached Store reads of the Training page, each keyed by the store URL it reads.

Keyed by the run's progress as well as its id: a finished run's reads stay cached a minute
(a long run's take a second or more), a training run's are read again once another episode
has finished. The progress comes from a run read uncached.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import streamlit as st

from app.dashboard import data
from app.dashboard.groups import reads as group_reads
from app.dashboard.training.curves import Curves, curves_of
from app.dashboard.training.flips import Flips, flips_of
from storage import training
from storage.read_models import RunSummary

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
    run's every group, read once."""

    curves: Curves
    flips: Flips | None
    """None when the run has more groups than the page reads (`group_reads.READ_UP_TO`)."""
    groups: int
    """The run's groups."""


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def steps_view(url: str, run_id: int, progress: Progress) -> StepsView:
    """A training run's per-step metrics, as many points as the page draws, with the
    questions each point's steps drew; and the questions whose result changed between the
    first and the last step that drew them (these two for a run of up to
    `group_reads.READ_UP_TO` groups)."""
    store = data.get_store(url)
    steps = training.training_steps(store, run_id)
    groups = sum(s.groups for s in steps)
    if groups > group_reads.READ_UP_TO:
        return StepsView(curves_of(steps), None, groups)
    # The overview lists as many groups as asked for: all of them. Reduced before caching:
    # the cache copies what it holds at every visit.
    every = store.group_overview(run_id, limit=sys.maxsize)
    return StepsView(
        curves_of(steps, every.groups), flips_of(every.groups, every.questions), groups
    )


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def questions(url: str, run_id: int, progress: Progress) -> list[training.TrainingQuestion]:
    """The questions a training run played, most played first."""
    return training.training_questions(data.get_store(url), run_id)


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def played_steps(url: str, run_id: int, question_id: str, progress: Progress) -> list[int]:
    """The training steps at which a question has a finished episode, in order."""
    return training.played_steps(data.get_store(url), run_id, question_id)


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def question_episodes(
    url: str, run_id: int, question_id: str, steps: Sequence[int], progress: Progress
) -> list[training.TrainingEpisode]:
    """A question's episodes at some steps of a training run, in training order."""
    return training.question_episodes(data.get_store(url), run_id, question_id, list(steps))
