"""Cached Store reads for the pages: one Store per URL, small reads cached for a few seconds.

Every cached read takes the store URL as a hashed argument, so two stores in one process (tests,
a second dashboard) never share entries; the Store itself is passed as `_store` (not hashed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import streamlit as st

from app.dashboard.settings import Settings, load_settings
from storage.read_models import (
    Annotation,
    Distribution,
    EpisodeDetail,
    EpisodeFilter,
    EpisodeSort,
    EpisodeSummary,
    Page,
    QuestionComparison,
    QuestionOutcomes,
    RunSummary,
    TagCount,
)
from storage.reads import TEXT_COUNT_CAP
from storage.store import Store

if TYPE_CHECKING:
    from app.dashboard.episode_query import ListQuery

# Live data (runs in progress) goes stale fast; finished data barely changes.
_LIVE_TTL = 2
_TTL = 5
COMPARE_QUESTION_CAP = 5000
"""Most questions the Compare page lists with their text (its statistics cover them all)."""


def settings() -> Settings:
    """The settings of this dashboard process (re-read each run: cheap, and tests change them)."""
    return load_settings()


@st.cache_resource(show_spinner=False)
def get_store(url: str) -> Store:
    """The one reading Store of this process for a URL: the pages never write."""
    return Store(url, read_only=True)


@st.cache_resource(show_spinner=False)
def get_writer(url: str) -> Store:
    """The writing Store for a URL, opened the first time a person launches or cancels a run."""
    return Store(url)


def store() -> Store:
    """The reading Store named by the settings."""
    return get_store(settings().store_url)


def writer() -> Store:
    """The writing Store named by the settings; refused on a read-only dashboard."""
    current = settings()
    if current.read_only:
        raise RuntimeError("this dashboard is read-only; it never writes to its store")
    return get_writer(current.store_url)


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _list_runs(_store: Store, url: str, limit: int) -> list[RunSummary]:
    return _store.list_runs(limit=limit)


def list_runs(limit: int = 200) -> list[RunSummary]:
    """Runs newest first."""
    return _list_runs(store(), settings().store_url, limit)


def list_runs_uncached(limit: int = 200) -> list[RunSummary]:
    """Runs newest first, read now, for the live Runs table."""
    return store().list_runs(limit=limit)


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _get_run(_store: Store, url: str, run_id: int) -> RunSummary | None:
    return _store.get_run(run_id)


def get_run(run_id: int) -> RunSummary | None:
    """One run, or None when the id is unknown."""
    return _get_run(store(), settings().store_url, run_id)


def get_run_uncached(run_id: int) -> RunSummary | None:
    """One run read now, for the live progress views."""
    return store().get_run(run_id)


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _list_episodes(
    _store: Store,
    url: str,
    flt: EpisodeFilter,
    sort: EpisodeSort,
    descending: bool,
    limit: int,
    cursor: str | None,
    with_total: bool,
    total_cap: int | None,
) -> Page[EpisodeSummary]:
    return _store.list_episodes(
        flt,
        sort=sort,
        descending=descending,
        limit=limit,
        cursor=cursor,
        with_total=with_total,
        total_cap=total_cap,
    )


def list_episodes(
    flt: EpisodeFilter,
    *,
    sort: EpisodeSort = "id",
    descending: bool = False,
    limit: int = 50,
    cursor: str | None = None,
    with_total: bool = True,
) -> Page[EpisodeSummary]:
    """One page of episodes (with the total count of matches, unless told not to count; a text
    search's counted up to `TEXT_COUNT_CAP`). ValueError for a cursor that is malformed or
    belongs to another order."""
    cap = TEXT_COUNT_CAP if flt.text else None
    return _list_episodes(
        store(), settings().store_url, flt, sort, descending, limit, cursor, with_total, cap
    )


def list_page(query: ListQuery, *, with_total: bool = True) -> Page[EpisodeSummary]:
    """The page of episodes an Episodes list query names (Episodes shows it; Replay walks it)."""
    return list_episodes(
        query.flt,
        sort=query.sort,
        descending=query.descending,
        limit=query.size,
        cursor=query.cursor,
        with_total=with_total,
    )


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _get_episode(_store: Store, url: str, episode_id: int) -> EpisodeDetail | None:
    return _store.get_episode(episode_id)


def get_episode(episode_id: int) -> EpisodeDetail | None:
    """One episode with its steps, or None when the id is unknown."""
    return _get_episode(store(), settings().store_url, episode_id)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _run_distributions(_store: Store, url: str, run_ids: tuple[int, ...]) -> list[Distribution]:
    return _store.run_distributions(run_ids)


def run_distributions(run_ids: Sequence[int]) -> list[Distribution]:
    """Action mix and histograms of each run."""
    return _run_distributions(store(), settings().store_url, tuple(run_ids))


@st.cache_data(ttl=_TTL, show_spinner=False)
def _compare_all(
    _store: Store, url: str, run_ids: tuple[int, ...], cap: int
) -> tuple[list[QuestionComparison], bool]:
    items: list[QuestionComparison] = []
    cursor: str | None = None
    while len(items) < cap:
        page = _store.compare_runs(
            run_ids, limit=min(500, cap - len(items)), cursor=cursor, with_episode_ids=False
        )
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return items, False
    return items, True


def compare_all(run_ids: Sequence[int]) -> tuple[list[QuestionComparison], bool]:
    """Per-question results of the runs (up to the cap) and whether the cap cut them short;
    counts only: `compare_question` has one question's episodes."""
    return _compare_all(store(), settings().store_url, tuple(run_ids), COMPARE_QUESTION_CAP)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _compare_question(
    _store: Store, url: str, run_ids: tuple[int, ...], question_id: str
) -> QuestionComparison | None:
    return _store.compare_question(run_ids, question_id)


def compare_question(run_ids: Sequence[int], question_id: str) -> QuestionComparison | None:
    """One question's results in each run, with its episodes' ids."""
    return _compare_question(store(), settings().store_url, tuple(run_ids), question_id)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _compare_outcomes(_store: Store, url: str, run_ids: tuple[int, ...]) -> list[QuestionOutcomes]:
    return _store.compare_outcomes(run_ids)


def compare_outcomes(run_ids: Sequence[int]) -> list[QuestionOutcomes]:
    """Episode and correct counts of the runs on every question they finished."""
    return _compare_outcomes(store(), settings().store_url, tuple(run_ids))


@st.cache_data(ttl=_TTL, show_spinner=False)
def _db_ids(_store: Store, url: str, run_ids: tuple[int, ...]) -> list[str]:
    return _store.list_db_ids(run_ids)


def db_ids(run_ids: Sequence[int] = ()) -> list[str]:
    """Database names played in the runs (all runs when none given)."""
    return _db_ids(store(), settings().store_url, tuple(run_ids))


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _tag_counts(_store: Store, url: str, run_ids: tuple[int, ...]) -> list[TagCount]:
    return _store.annotation_tags(run_ids)


def tag_counts(run_ids: Sequence[int] = ()) -> list[TagCount]:
    """Tags on the runs' episodes (every run's when none given), most used first."""
    return _tag_counts(store(), settings().store_url, tuple(run_ids))


@st.cache_data(ttl=_LIVE_TTL, show_spinner=False)
def _episode_tags(_store: Store, url: str, episode_ids: tuple[int, ...]) -> dict[int, list[str]]:
    found = _store.annotations_of(episode_ids)
    return {i: sorted({a.tag for a in notes}) for i, notes in found.items()}


def episode_tags(episode_ids: Sequence[int]) -> dict[int, list[str]]:
    """The distinct tags on each episode (on it or its steps), for a page of the list."""
    return _episode_tags(store(), settings().store_url, tuple(episode_ids))


def episode_annotations(episode_id: int) -> list[Annotation]:
    """An episode's tags and notes read now (Replay shows a label the moment it is added)."""
    return store().annotations(episode_id)


def clear() -> None:
    """Drop cached reads, after this process wrote to the store."""
    _list_runs.clear()
    _get_run.clear()
    _list_episodes.clear()
    _tag_counts.clear()
    _episode_tags.clear()
