"""The Ray actor: builds its own policy and environments from the run spec and plays shards.

The class is plain Python; `cluster` makes it a Ray actor. `play` is a streaming generator:
the runner plays the shard in a thread and every iteration comes back as one `ShardUpdate`,
so the driver counts episodes (and, on SQLite, writes them) while the shard is still going.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rollout_core.policies.registry import make_policy
from rollout_core.records import EpisodeRecord, IterationBatch, PolicyInfo, RunSpec
from rollout_core.runner import EpisodeTask, RunEnd, RunStats, run_episodes
from rollout_core.specs import dataset_for_spec
from storage.sink import StoreSink
from storage.store import Store

UPDATES_IN_FLIGHT = 4
"""Iterations a worker may run ahead of the driver: bounds the memory on both sides while a
slow store write catches up."""


@dataclass(frozen=True, slots=True)
class ShardUpdate:
    """One iteration of a shard, as the worker reports it."""

    finished: tuple[EpisodeRecord, ...] = ()
    steps: int = 0
    batch: IterationBatch | None = None
    """The iteration's records for the driver to write; None when the worker wrote them."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShardEnd:
    """The last item of a shard: the runner's counters."""

    end: RunEnd
    policy_calls: int
    policy_seconds: float
    batch_size: int


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


class _Forward:
    """The runner's sink in a worker: writes to the store itself (PostgreSQL) or passes the
    batch on to the driver (SQLite), then reports the iteration."""

    def __init__(self, out: queue.Queue[object], sink: StoreSink | None) -> None:
        self.out, self.sink = out, sink

    def write(self, batch: IterationBatch) -> None:
        if self.sink is not None:
            self.sink.write(batch)
        self.out.put(
            ShardUpdate(
                finished=tuple(batch.finished),
                steps=len(batch.steps),
                batch=None if self.sink is not None else batch,
            )
        )


class ShardPlayer:
    """One worker: a policy, a dataset and, when it writes directly, a store writer."""

    def __init__(self, spec: RunSpec, store_url: str | None) -> None:
        self.spec = spec
        self.dataset = dataset_for_spec(spec)
        self.policy = make_policy(spec.policy, spec.generation)
        self.store = Store(store_url) if store_url is not None else None
        self._stop = threading.Event()

    def describe(self) -> PolicyInfo:
        """What the policy reports about itself (the run records the first worker's)."""
        return self.policy.describe()

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    def stop(self) -> None:
        """End the shard being played after its current iteration's write, and every later
        one at once (a stopped run never plays on)."""
        self._stop.set()

    def play(self, run_id: int, tasks: Sequence[EpisodeTask]) -> Iterator[ShardUpdate | ShardEnd]:
        """Play a shard: one ShardUpdate per iteration, then a ShardEnd (at once after stop)."""
        out: queue.Queue[object] = queue.Queue(maxsize=UPDATES_IN_FLIGHT)
        # A replayed shard may hold episodes a dead worker finished after its last report.
        sink = None if self.store is None else self.store.sink(run_id, skip_finished=True)
        thread = threading.Thread(
            target=self._run, args=(tasks, out, sink), daemon=True, name="rollscope-shard"
        )
        thread.start()
        while True:
            item = out.get()
            if isinstance(item, _Failed):
                thread.join()
                raise item.error
            assert isinstance(item, ShardUpdate | ShardEnd)
            yield item
            if isinstance(item, ShardEnd):
                thread.join()
                return

    def _run(
        self, tasks: Sequence[EpisodeTask], out: queue.Queue[object], sink: StoreSink | None
    ) -> None:
        def note(text: str) -> None:
            out.put(ShardUpdate(notes=(text,)))

        try:
            stats: RunStats = run_episodes(
                self.dataset,
                tasks,
                self.policy,
                _Forward(out, sink),
                batch_size=self.spec.generation.batch_size,
                environment=self.spec.environment,
                should_stop=self._stop.is_set,
                on_note=note,
            )
        except BaseException as exc:  # handed to the generator, which raises it to the driver
            out.put(_Failed(exc))
            return
        out.put(ShardEnd(stats.end, stats.policy_calls, stats.policy_seconds, stats.batch_size))
