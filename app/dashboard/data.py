"""What every page shares: the Store objects of this process, its settings, the one way a read
is cached (`cached_read`), and the reads most pages make (runs, one run, one episode).

A feature's own reads live beside its page (`runs/reads.py`, `compare/reads.py`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import streamlit as st

from app.dashboard.settings import Settings, load_settings
from storage import training
from storage.read_models import EpisodeDetail, GroupKey, RunSummary
from storage.store import Store

P = ParamSpec("P")
R = TypeVar("R")

LIVE_TTL = 2
"""Seconds a read of live data (runs in progress, labels) stays cached: it goes stale fast."""
TTL = 5
"""Seconds any other read stays cached: finished runs barely change."""


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


class CachedRead(Generic[P, R]):
    """A Store read called without its Store; see `cached_read`."""

    def __init__(self, read: Callable[Concatenate[Store, P], R], cached: Any) -> None:
        self._cached = cached
        self.__doc__ = read.__doc__

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._cached(store(), settings().store_url, *args, **kwargs)
        return result

    def clear(self) -> None:
        """Drop every cached result of this read."""
        self._cached.clear()


_WRITTEN: list[CachedRead[..., Any]] = []


def cached_read(
    ttl: float = TTL, *, max_entries: int | None = None, written: bool = False
) -> Callable[[Callable[Concatenate[Store, P], R]], CachedRead[P, R]]:
    """Cache `read(store, *args)`, called as `read(*args)` on this dashboard's store.

    The cache is keyed by the store URL and the arguments (which must be hashable by
    Streamlit); the Store itself is passed as `_store`, so it is not hashed, and two stores in
    one process (tests, a second dashboard) never share entries. `written`: this process's
    own writes (labels, launches, forks) change the result, so `clear()` drops it.
    """

    def wrap(read: Callable[Concatenate[Store, P], R]) -> CachedRead[P, R]:
        def keyed(_store: Store, url: str, *args: P.args, **kwargs: P.kwargs) -> R:
            return read(_store, *args, **kwargs)

        # Streamlit keys a cache by the function's module and qualified name: the read's own.
        keyed.__module__, keyed.__qualname__ = read.__module__, read.__qualname__
        cached = st.cache_data(ttl=ttl, max_entries=max_entries, show_spinner=False)(keyed)
        found: CachedRead[P, R] = CachedRead(read, cached)
        if written:
            _WRITTEN.append(found)
        return found

    return wrap


def clear() -> None:
    """Drop the cached reads this process's writes change, after it wrote to the store."""
    for read in _WRITTEN:
        read.clear()


RUNS_LISTED = 200
"""Runs a page lists (the newest); an older one opens from a link that names it."""


@cached_read(LIVE_TTL, written=True)
def list_runs(store: Store, training: bool = False) -> list[RunSummary]:
    """The newest `RUNS_LISTED` runs, newest first (`training`: of those that may carry
    training steps)."""
    return store.list_runs(limit=RUNS_LISTED, training=training)


@cached_read(LIVE_TTL, written=True)
def count_runs(store: Store) -> int:
    """How many runs the store holds."""
    return store.count_runs()


@cached_read(LIVE_TTL, written=True)
def get_run(store: Store, run_id: int) -> RunSummary | None:
    """One run, or None when the id is unknown."""
    return store.get_run(run_id)


@cached_read(LIVE_TTL)
def finished_steps(store: Store, run_id: int) -> list[int]:
    """The training steps at which a run finished episodes: the steps Compare and the
    Question map offer as sides of their own."""
    return training.finished_steps(store, run_id)


def get_run_uncached(run_id: int) -> RunSummary | None:
    """One run read now, for a live progress view (the Training page follows a running run)."""
    return store().get_run(run_id)


@cached_read(LIVE_TTL)
def group_size(store: Store, run_id: int, key: GroupKey) -> int:
    """How many finished episodes a GRPO group has."""
    return store.group_size(run_id, key)


@cached_read(LIVE_TTL)
def get_episode(store: Store, episode_id: int) -> EpisodeDetail | None:
    """One episode with its steps, or None when the id is unknown."""
    return store.get_episode(episode_id)
