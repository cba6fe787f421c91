"""Cached Store reads of the analysis views: GRPO groups and the question x checkpoint map.

As in `data`: the store URL is a hashed argument, the Store itself passed as `_store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import streamlit as st

from app.dashboard import data
from app.dashboard.question_map import (
    AccuracyPoint,
    PairFlips,
    QuestionMap,
    accuracy_intervals,
    build_map,
    flips,
)
from storage.read_models import GroupDetail, GroupKey, GroupOverview
from storage.store import Store

_TTL = 5


@dataclass(frozen=True)
class MapView:
    """The map's matrix and flips, computed once per set of runs."""

    qmap: QuestionMap
    flips: list[PairFlips]


@st.cache_data(ttl=_TTL, show_spinner=False)
def _group_overview(_store: Store, url: str, run_id: int, question: str | None) -> GroupOverview:
    return _store.group_overview(run_id, question=question)


def group_overview(run_id: int, question: str | None = None) -> GroupOverview:
    """A run's GRPO groups summed up, listing those of highest reward std (or of `question`)."""
    return _group_overview(data.store(), data.settings().store_url, run_id, question)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _get_group(_store: Store, url: str, run_id: int, key: GroupKey) -> GroupDetail | None:
    return _store.get_group(run_id, key)


def get_group(run_id: int, key: GroupKey) -> GroupDetail | None:
    """One group with its episodes and advantages, or None."""
    return _get_group(data.store(), data.settings().store_url, run_id, key)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _map_view(_store: Store, url: str, run_ids: tuple[int, ...]) -> MapView:
    qmap = build_map(_store.outcome_matrix(run_ids))
    return MapView(qmap, flips(qmap))


def map_view(run_ids: Sequence[int]) -> MapView:
    """The map of the runs, in the order given: rates and flips."""
    return _map_view(data.store(), data.settings().store_url, tuple(run_ids))


@st.cache_data(ttl=_TTL, show_spinner=False)
def _map_accuracy(_store: Store, url: str, run_ids: tuple[int, ...]) -> list[AccuracyPoint]:
    return accuracy_intervals(_map_view(_store, url, run_ids).qmap)


def map_accuracy(run_ids: Sequence[int]) -> list[AccuracyPoint]:
    """Each run's accuracy with its bootstrap interval. Apart from `map_view` so the heatmap
    is on screen while the resampling runs (0.7-0.9 s for 10 runs x 5,000 questions on a
    loaded 2-core machine)."""
    return _map_accuracy(data.store(), data.settings().store_url, tuple(run_ids))
