"""Cached Store reads of the Compare page."""

from __future__ import annotations

from app.dashboard.data import cached_read
from storage import training
from storage.read_models import (
    IdApart,
    QuestionComparison,
    QuestionOutcomes,
    RunKey,
    RunSummary,
)
from storage.store import Store

QUESTION_CAP = 5000
"""Most questions the Compare page lists with their text (its statistics cover them all)."""
_PAGE = 500


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
def compare_outcomes(
    store: Store, run_ids: tuple[RunKey, ...]
) -> tuple[list[QuestionOutcomes], list[IdApart]]:
    """Episode and correct counts of the runs on every question they finished, and the ids
    two of them share that ask different questions in each."""
    return store.compare_outcomes_apart(run_ids)


@cached_read()
def run_at_step(store: Store, run_id: int, step: int) -> RunSummary | None:
    """A run with the figures of one of its training steps; None when the run is gone."""
    run = store.get_run(run_id)
    return None if run is None else training.run_at_step(store, run, step)


@cached_read()
def failure_counts_on(store: Store, key: RunKey, question_ids: tuple[str, ...]) -> dict[str, int]:
    """A side's finished episodes per failure class on these questions only (the store's
    counts cover all of a run's questions)."""
    return store.failure_counts_on(key, question_ids)
