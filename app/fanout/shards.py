"""Split a run's episodes into shards for the workers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rollout_core.runner import EpisodeTask

SHARDS_PER_WORKER_ROUND = 2
"""Each shard takes 1/(2 x workers) of the episodes left: the first shards are big, so a
worker's batch stays full (the runner refills slots within a shard, not across shards), and the
last ones are small, so the workers finish close together."""


def split_shards(
    tasks: Sequence[EpisodeTask], workers: int, batch_size: int
) -> list[tuple[EpisodeTask, ...]]:
    """Consecutive shards of shrinking size (guided scheduling), none smaller than a batch
    except the last; together they hold every task once, in order."""
    if workers < 1 or batch_size < 1:
        raise ValueError(f"workers and batch_size must be at least 1, got {workers}, {batch_size}")
    shards: list[tuple[EpisodeTask, ...]] = []
    start = 0
    while start < len(tasks):
        left = len(tasks) - start
        size = max(batch_size, math.ceil(left / (SHARDS_PER_WORKER_ROUND * workers)))
        shards.append(tuple(tasks[start : start + size]))
        start += size
    return shards
