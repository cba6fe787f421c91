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
    played_by_all,
)
from storage.read_models import EpisodeFilter, IdApart, RunKey, RunStep, run_of
from storage.store import Store


@dataclass(frozen=True)
class MapView:
    """The map's matrix and flips, computed once per set of runs."""

    qmap: QuestionMap
    flips: list[PairFlips]
    questions: int
    """Questions any of the runs played: more than the map's when it holds only the questions
    every run played."""
    shared_only: bool
    """The map holds only the questions every run played."""
    apart: list[IdApart]
    """The ids a run asks another question under than an earlier run: its cell left empty."""

    @property
    def left_out(self) -> int:
        return self.questions - len(self.qmap.question_ids)


@cached_read()
def map_view(store: Store, run_ids: tuple[RunKey, ...], shared_only: bool) -> MapView:
    """The map of the runs, in the order given: rates and flips; `shared_only`: over only the
    questions every run played, cut from the cached whole map of this same store. (Arguments
    go by position: a cache key tells `f(x)` from `f(shared_only=x)`.)"""
    if shared_only:
        whole = map_view(run_ids, False)
        qmap = played_by_all(whole.qmap)
        return MapView(qmap, flips(qmap), whole.questions, True, whole.apart)
    matrix = store.outcome_matrix(run_ids)
    qmap = build_map(matrix)
    return MapView(qmap, flips(qmap), len(qmap.question_ids), False, matrix.apart)


@cached_read()
def map_accuracy(
    store: Store, run_ids: tuple[RunKey, ...], shared_only: bool
) -> list[AccuracyPoint]:
    """Each run's accuracy with its bootstrap interval, from `map_view`'s cached map of this
    same store. Apart from `map_view` so the heatmap is on screen while the resampling runs."""
    return accuracy_intervals(map_view(run_ids, shared_only).qmap)


@cached_read()
def first_episode(store: Store, key: RunKey, question_id: str) -> int | None:
    """The id of a run's (or training step's) first finished episode of a question; None when
    it has none."""
    step = key.train_step if isinstance(key, RunStep) else None
    flt = EpisodeFilter(
        run_ids=(run_of(key),), question_id=question_id, min_train_step=step, max_train_step=step
    )
    found = store.list_episodes(flt, limit=1).items
    return found[0].id if found else None
