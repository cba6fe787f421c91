"""Cached Store reads of the Training page, each keyed by the store URL it reads.

Keyed by the run's progress as well as its id: a finished run's reads stay cached a minute
(a long run's take a second or more), a training run's are read again once another episode
has finished. The progress comes from a run read uncached.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import streamlit as st

from app.dashboard import data
from app.dashboard.training.curves import Curves, curves_of
from app.dashboard.training.flips import Flips, flips_of
from storage import training
from storage.read_models import GroupOverview, RunSummary
from storage.store import Store

_TTL = 60
_ENTRIES = 32
"""Entries per read at most: a live run leaves one behind at every refresh."""

Progress = tuple[str, int]
"""A run's (status, finished episodes)."""


def progress_of(run: RunSummary) -> Progress:
    """What a training run's cached reads are keyed by besides its id."""
    return run.status, run.episodes_finished


def _every_group(store: Store, run_id: int) -> GroupOverview:
    # The overview lists as many groups as asked for: all of them, for what each step drew.
    return store.group_overview(run_id, limit=sys.maxsize)


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def curves(url: str, run_id: int, progress: Progress) -> Curves:
    """A training run's per-step metrics, as many points as the page draws, with the
    questions each point's steps drew."""
    # Reduced before caching: the cache copies what it holds at every visit.
    store = data.get_store(url)
    return curves_of(training.training_steps(store, run_id), _every_group(store, run_id).groups)


@st.cache_data(ttl=_TTL, max_entries=_ENTRIES, show_spinner=False)
def flips(url: str, run_id: int, progress: Progress) -> Flips:
    """The questions whose result changed between the first and the last step that drew them."""
    found = _every_group(data.get_store(url), run_id)
    return flips_of(found.groups, found.questions)


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
