"""Cached Store reads of the Runs page (Compare charts the same distributions)."""

from __future__ import annotations

from app.dashboard.data import cached_read
from storage.read_models import Distribution, RunKey
from storage.store import Store


@cached_read()
def run_distributions(store: Store, run_ids: tuple[RunKey, ...]) -> list[Distribution]:
    """Action mix and histograms of each run (or training step of a run)."""
    return store.run_distributions(run_ids)
