"""Cached Store reads of the question map."""

from __future__ import annotations

from dataclasses import dataclass

from app.dashboard.data import cached_read
from app.dashboard.question_map.matrix import (
    AccuracyPoint,
    PairFlips,
    QuestionMap,
    accuracy_intervals,
    build_map,
    flips,
)
from storage.store import Store


@dataclass(frozen=True)
class MapView:
    """The map's matrix and flips, computed once per set of runs."""

    qmap: QuestionMap
    flips: list[PairFlips]


@cached_read()
def map_view(store: Store, run_ids: tuple[int, ...]) -> MapView:
    """The map of the runs, in the order given: rates and flips."""
    qmap = build_map(store.outcome_matrix(run_ids))
    return MapView(qmap, flips(qmap))


@cached_read()
def map_accuracy(store: Store, run_ids: tuple[int, ...]) -> list[AccuracyPoint]:
    """Each run's accuracy with its bootstrap interval, from `map_view`'s cached map of this
    same store. Apart from `map_view` so the heatmap is on screen while the resampling runs."""
    return accuracy_intervals(map_view(run_ids).qmap)
