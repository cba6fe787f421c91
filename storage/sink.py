"""`StoreSink`: the one sink every producer writes through (the runner, a fan-out driver or
worker, a trainer's rollout function and tools, forks).

Each `write` takes an `IterationBatch` (episodes started, steps played, episodes finished) and
writes it in one transaction, or holds it and writes several together (`group_seconds`).
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import TYPE_CHECKING

from rollout_core.records import EpisodeKey, IterationBatch
from storage.collector import collector_paused
from storage.prompts import PromptEncoder
from storage.writes import (
    finished_among,
    merged,
    retry_locked,
    without_keys,
    write_batch,
)

if TYPE_CHECKING:
    from storage.store import Store

GROUP_STEPS = 16_384
"""A grouping sink writes once it holds this many steps, however little time has passed: it
bounds what a group holds in memory."""


class StoreSink:
    """The sink for one run of a store.

    With `group_seconds` 0 each `write` is one transaction. Above 0 the sink holds batches and
    writes them together, as one transaction, once that long has passed since it last wrote
    (or it holds `GROUP_STEPS` steps), and at `flush` and the end of a `with` block: on SQLite
    a commit costs about as much as writing a runner iteration's rows, so fewer, larger
    transactions write several times the step rows a second. The price: the store is up to
    `group_seconds` (plus one iteration) behind the runner, and what is held when the process
    dies is lost; those episodes were not finished in the store, so a resume plays them again.
    A writer whose caller counts a batch as stored once `write` returns (a fan-out worker
    reporting to its driver, a trainer) keeps 0.

    A started episode replaces an unfinished earlier attempt of the same (question, sample).
    One that already finished raises, unless `skip_finished`: then the finished attempt stands
    and this sink drops the new attempt's records (a retried fan-out shard replays episodes
    whose results were written before its worker died).
    """

    def __init__(
        self,
        store: Store,
        run_id: int,
        *,
        skip_finished: bool = False,
        group_seconds: float = 0.0,
    ) -> None:
        if group_seconds < 0:
            raise ValueError(f"group_seconds must be 0 or more, got {group_seconds}")
        self.store = store
        self.run_id = run_id
        self.group_seconds = group_seconds
        self._ids: dict[EpisodeKey, int] = {}
        """(question_id, sample_index) -> episode id of the episodes still being played."""
        self._prompts = PromptEncoder()
        self.skipped: set[EpisodeKey] | None = set() if skip_finished else None
        """With skip_finished: the episodes this sink found finished already and drops."""
        self._held: list[IterationBatch] = []
        self._held_steps = 0
        self._last_write = time.monotonic()

    def write(self, batch: IterationBatch) -> None:
        if not self.group_seconds:
            self._write(batch)
            return
        self._held.append(batch)
        self._held_steps += len(batch.steps)
        waited = time.monotonic() - self._last_write
        if self._held_steps >= GROUP_STEPS or waited >= self.group_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the batches held, as one transaction."""
        if not self._held:
            return
        # Taken before writing: a batch whose transaction failed is not tried again.
        held, self._held, self._held_steps = self._held, [], 0
        self._write(held[0] if len(held) == 1 else merged(held))

    def __enter__(self) -> StoreSink:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.flush()
            return
        # Leaving on an error: keep what is held if the store takes it (finished episodes
        # need not be played again), without hiding the error under a second one.
        with suppress(Exception):
            self.flush()

    def _write(self, batch: IterationBatch) -> None:
        skipped = self.skipped

        def attempt() -> tuple[dict[EpisodeKey, int], set[EpisodeKey]]:
            with self.store._writing() as session:
                newly: set[EpisodeKey] = set()
                kept = batch
                if skipped is not None:
                    newly = finished_among(session, self.run_id, [s.key for s in batch.started])
                    kept = without_keys(batch, skipped | newly)
                created = write_batch(session, self.run_id, kept, self._ids, self._prompts)
                return created, newly

        # The collector stays off until the batch's records are dropped: none is in a cycle,
        # and its passes over them are pure cost.
        with collector_paused():
            created, newly = retry_locked(attempt)
        # The caches change only after the commit, so a failed batch leaves them as they were.
        self._ids.update(created)
        done = [e.key for e in batch.finished]
        self._prompts.commit(self._ids[k] for k in done if k in self._ids)
        for k in done:
            self._ids.pop(k, None)
        if skipped is not None:
            skipped |= newly
        self._last_write = time.monotonic()
