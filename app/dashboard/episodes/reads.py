"""Cached Store reads of the Episodes page (Replay walks the same list and labels with the same
tags)."""

from __future__ import annotations

from app.dashboard.data import LIVE_TTL, cached_read
from app.dashboard.episodes.query import ListQuery
from storage.read_models import EpisodeSummary, Page, TagCount
from storage.reads import TEXT_COUNT_CAP
from storage.store import Store


@cached_read(LIVE_TTL, written=True)
def list_page(store: Store, query: ListQuery, with_total: bool = True) -> Page[EpisodeSummary]:
    """The page of episodes a list query names, with the count of matches unless told not to
    count (a text search's counted up to `TEXT_COUNT_CAP`). ValueError for a cursor that is
    malformed or belongs to another order."""
    return store.list_episodes(
        query.flt,
        sort=query.sort,
        descending=query.descending,
        limit=query.size,
        cursor=query.cursor,
        with_total=with_total,
        total_cap=TEXT_COUNT_CAP if query.flt.text else None,
    )


@cached_read()
def db_ids(store: Store, run_ids: tuple[int, ...] = ()) -> list[str]:
    """Database names played in the runs (all runs when none given)."""
    return store.list_db_ids(run_ids)


@cached_read(LIVE_TTL, written=True)
def tag_counts(store: Store, run_ids: tuple[int, ...] = ()) -> list[TagCount]:
    """Tags on the runs' episodes (every run's when none given), most used first."""
    return store.annotation_tags(run_ids)


@cached_read(LIVE_TTL, written=True)
def episode_tags(store: Store, episode_ids: tuple[int, ...]) -> dict[int, list[str]]:
    """The distinct tags on each episode (on it or its steps), for a page of the list."""
    found = store.annotations_of(episode_ids)
    return {i: sorted({a.tag for a in notes}) for i, notes in found.items()}


@cached_read(LIVE_TTL, written=True)
def replaced(store: Store, episode_ids: tuple[int, ...]) -> frozenset[int]:
    """The episodes of a page that a later play of their training step replaced (a trainer
    resumed from a checkpoint plays the steps after it again)."""
    return store.replaced_among(episode_ids)
