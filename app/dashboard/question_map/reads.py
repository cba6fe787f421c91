"""Cached Store reads of the question map, each keyed by the store URL it reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import streamlit as st

from app.dashboard import data
from app.dashboard.question_map.matrix import (
    AccuracyPoint,
    PairFlips,
    QuestionMap,
    accuracy_intervals,
    build_map,
    flips,
)

_TTL = 5


@dataclass(frozen=True)
class MapView:
    """The map's matrix and flips, computed once per set of runs."""

    qmap: QuestionMap
    flips: list[PairFlips]


@st.cache_data(ttl=_TTL, show_spinner=False)
def map_view(url: str, run_ids: Sequence[int]) -> MapView:
    """The map of the runs, in the order given: rates and flips."""
    qmap = build_map(data.get_store(url).outcome_matrix(run_ids))
    return MapView(qmap, flips(qmap))


@st.cache_data(ttl=_TTL, show_spinner=False)
def map_accuracy(url: str, run_ids: Sequence[int]) -> list[AccuracyPoint]:
    """Each run's accuracy with its bootstrap interval. Apart from `map_view` so the heatmap
    is on screen while the resampling runs."""
    return accuracy_intervals(map_view(url, run_ids).qmap)
