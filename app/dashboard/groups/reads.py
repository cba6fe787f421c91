"""Cached Store reads of the GRPO groups view."""

from __future__ import annotations

from app.dashboard.data import cached_read
from storage import training
from storage.read_models import GroupDetail, GroupKey, GroupOverview
from storage.store import Store

LISTED = 500
"""Groups the overview lists, highest std first (its counts cover every group)."""


@cached_read()
def overview(
    store: Store,
    run_id: int,
    question: str | None = None,
    steps: tuple[int | None, int | None] = (None, None),
) -> GroupOverview:
    """A run's GRPO groups summed up, listing those of highest reward std (or of `question`);
    a training run's at a range of training `steps` (first, last; None for an open end)."""
    first, last = steps
    return store.group_overview(
        run_id, limit=LISTED, question=question, min_train_step=first, max_train_step=last
    )


@cached_read()
def by_step(store: Store, run_id: int) -> bool:
    """Whether the run's groups are a question's samples at one training step."""
    return store.groups_by_step(run_id)


@cached_read()
def group(store: Store, run_id: int, key: GroupKey) -> GroupDetail | None:
    """One group with its episodes and advantages, or None."""
    return store.get_group(run_id, key)


@cached_read()
def replaced(store: Store, run_id: int) -> dict[GroupKey, int]:
    """The run's groups holding episodes of an earlier play of their step, which the rewritten
    step file no longer holds, with how many."""
    return training.replaced_groups(store, run_id)
