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
    """Everything the map page draws, computed once per set of runs."""

    qmap: QuestionMap
    flips: list[PairFlips]
    accuracy: list[AccuracyPoint]


@st.cache_data(ttl=_TTL, show_spinner=False)
def _group_overview(_store: Store, url: str, run_id: int) -> GroupOverview:
    return _store.group_overview(run_id)


def group_overview(run_id: int) -> GroupOverview:
    """Every GRPO group of a run, highest reward std first."""
    return _group_overview(data.store(), data.settings().store_url, run_id)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _get_group(_store: Store, url: str, run_id: int, key: GroupKey) -> GroupDetail | None:
    return _store.get_group(run_id, key)


def get_group(run_id: int, key: GroupKey) -> GroupDetail | None:
    """One group with its episodes and advantages, or None."""
    return _get_group(data.store(), data.settings().store_url, run_id, key)


@st.cache_data(ttl=_TTL, show_spinner=False)
def _map_view(_store: Store, url: str, run_ids: tuple[int, ...]) -> MapView:
    qmap = build_map(_store.outcome_matrix(run_ids))
    return MapView(qmap, flips(qmap), accuracy_intervals(qmap))


def map_view(run_ids: Sequence[int]) -> MapView:
    """The map of the runs, in the order given: rates, flips and accuracy intervals."""
    return _map_view(data.store(), data.settings().store_url, tuple(run_ids))
