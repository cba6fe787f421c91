"""Cached Store reads of the Compare page."""

from __future__ import annotations

from app.dashboard.data import cached_read
from rollout_core.records import FAILURE_CLASSES
from storage import training
from storage.read_models import (
    EpisodeFilter,
    QuestionComparison,
    QuestionOutcomes,
    RunKey,
    RunStep,
    RunSummary,
    run_of,
)
from storage.store import Store

QUESTION_CAP = 5000
"""Most questions the Compare page lists with their text (its statistics cover them all)."""
_PAGE = 500
CLASS_COUNT_CAP = 200_000
"""Most finished episodes of a side read one by one to count its failure classes on the
shared questions; a larger side shows its whole counts, and the page says so."""
_CLASS_PAGE = 5000


@cached_read()
def compare_all(store: Store, run_ids: tuple[RunKey, ...]) -> tuple[list[QuestionComparison], bool]:
    """Per-question results of the runs (up to `QUESTION_CAP`) and whether the cap cut them
    short; counts only: `compare_question` has one question's episodes."""
    items: list[QuestionComparison] = []
    cursor: str | None = None
    while len(items) < QUESTION_CAP:
        limit = min(_PAGE, QUESTION_CAP - len(items))
        page = store.compare_runs(run_ids, limit=limit, cursor=cursor, with_episode_ids=False)
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return items, False
    return items, True


@cached_read()
def compare_question(
    store: Store, run_ids: tuple[RunKey, ...], question_id: str
) -> QuestionComparison | None:
    """One question's results in each run, with its episodes' ids."""
    return store.compare_question(run_ids, question_id)


@cached_read()
def compare_outcomes(store: Store, run_ids: tuple[RunKey, ...]) -> list[QuestionOutcomes]:
    """Episode and correct counts of the runs on every question they finished."""
    return store.compare_outcomes(run_ids)


@cached_read()
def run_at_step(store: Store, run_id: int, step: int) -> RunSummary | None:
    """A run with the figures of one of its training steps; None when the run is gone."""
    run = store.get_run(run_id)
    return None if run is None else training.run_at_step(store, run, step)


@cached_read()
def failure_counts_on(store: Store, key: RunKey, question_ids: tuple[str, ...]) -> dict[str, int]:
    """A side's finished episodes per failure class on these questions only (the store keeps
    whole-run counts): its episodes read a page at a time."""
    step = key.train_step if isinstance(key, RunStep) else None
    flt = EpisodeFilter(run_ids=(run_of(key),), min_train_step=step, max_train_step=step)
    wanted = set(question_ids)
    counts: dict[str, int] = dict.fromkeys(FAILURE_CLASSES, 0)
    cursor: str | None = None
    while True:
        page = store.list_episodes(flt, limit=_CLASS_PAGE, cursor=cursor)
        for e in page.items:
            if e.failure_class is not None and e.question_id in wanted:
                counts[e.failure_class] += 1
        cursor = page.next_cursor
        if cursor is None:
            return counts
