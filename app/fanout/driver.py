"""The driver: hands shards to the workers, records what comes back, replays what a dead worker
left unfinished.

Each episode is counted once, by its (question, sample) key, when its finish comes back. On
SQLite the driver is the store's one writer: it writes the iterations as they arrive, grouped
as a single-process run groups them (`group_seconds`); on PostgreSQL the workers have written
them already. A worker that dies mid-shard is restarted by Ray; what it sent is written, and
the episodes of its shard not counted yet go back to the front of the queue and start from
their first step (the store replaces an unfinished attempt and keeps a finished one).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from app.fanout.shards import split_shards
from app.fanout.worker import UPDATES_IN_FLIGHT, ShardEnd, ShardUpdate
from app.plural import counted
from rollout_core.errors import RollscopeError
from rollout_core.records import EpisodeKey, EpisodeRecord
from rollout_core.runner import EpisodeTask, RunStats
from storage.sink import StoreSink
from storage.store import Store

WAIT_SECONDS = 0.5
"""Longest wait for a worker's next iteration before the driver checks for a stop again."""
PROBE_EVERY_SECONDS = 0.5
"""How often a restarting worker is asked whether it is back (calls made meanwhile fail)."""
REVIVE_SECONDS = 600.0
"""A restarted worker rebuilds its policy (minutes for a large model); longer means Ray cannot
place it again (its node is gone, say)."""
MAX_ATTEMPTS = 3
"""Plays of one shard before the run fails: a worker that dies three times on the same episodes
(killed for memory each time, say) would die a fourth."""


class FanoutError(RollscopeError, RuntimeError):
    """The fan-out cannot go on (workers keep dying, none left); the message is one line."""


@dataclass
class _Shard:
    number: int
    tasks: tuple[EpisodeTask, ...]
    attempt: int = 1


@dataclass
class _Playing:
    shard: _Shard
    worker: int
    sink: StoreSink | None
    """The driver's writer for this attempt (SQLite); None when the worker writes."""


def play_shards(
    handles: Sequence[Any],
    store: Store,
    run_id: int,
    tasks: Sequence[EpisodeTask],
    *,
    batch_size: int,
    workers_write: bool,
    should_stop: Callable[[], bool],
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    group_seconds: float = 0.0,
) -> RunStats:
    """Play `tasks` on the worker actors `handles` into the run; returns this play's counters.

    On SQLite the driver writes what the workers send, each shard's iterations grouped into a
    transaction every `group_seconds` (`StoreSink`). Stopping (`should_stop`) asks every worker
    to end after its current iteration; on SQLite what arrives after that is dropped, as a
    single-process run drops its next iteration.
    """
    return _Driver(
        list(handles),
        store,
        run_id,
        batch_size,
        workers_write,
        should_stop,
        on_episode,
        on_note,
        group_seconds,
    ).play(tasks)


class _Driver:
    def __init__(
        self,
        handles: list[Any],
        store: Store,
        run_id: int,
        batch_size: int,
        workers_write: bool,
        should_stop: Callable[[], bool],
        on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
        on_note: Callable[[str], None] | None,
        group_seconds: float,
    ) -> None:
        self.handles = handles
        self.group_seconds = group_seconds
        self.store, self.run_id = store, run_id
        self.workers_write = workers_write
        self.should_stop, self.on_episode, self.on_note = should_stop, on_episode, on_note
        self.stats = RunStats(batch_size=batch_size)
        self.counted: set[EpisodeKey] = set()
        self.queue: deque[_Shard] = deque()
        self.idle: list[int] = list(range(len(handles)))
        self.playing: dict[Any, _Playing] = {}
        self.reviving: dict[int, tuple[float, float]] = {}
        """Restarting workers: (when it died, when to ask again whether it is back)."""
        self.probes: dict[Any, int] = {}
        """Pending `pid` calls to restarting workers."""
        self.stopping = False

    def play(self, tasks: Sequence[EpisodeTask]) -> RunStats:
        started = time.perf_counter()
        shards = split_shards(tasks, len(self.handles), self.stats.batch_size)
        self.queue.extend(_Shard(i, shard) for i, shard in enumerate(shards, 1))
        # What the sinks hold is written however play ends: finished episodes need not be
        # played again. An error while writing it does not hide the one that ended play.
        try:
            self._play()
        except BaseException:
            with suppress(Exception):
                self._flush_all()
            raise
        self._flush_all()
        self.stats.wall_seconds = time.perf_counter() - started
        return self.stats

    def _flush_all(self) -> None:
        for playing in self.playing.values():
            if playing.sink is not None:
                playing.sink.flush()

    def _play(self) -> None:
        import ray

        while self.playing or (self.queue and not self.stopping):
            self._probe()
            self._hand_out()
            waiting = [*self.playing, *self.probes]
            if not waiting:  # every worker is restarting: ask again shortly
                time.sleep(PROBE_EVERY_SECONDS)
                continue
            ready, _ = ray.wait(waiting, num_returns=1, timeout=WAIT_SECONDS)
            for ref in ready:
                if ref in self.probes:
                    self._revived(ref)
                else:
                    self._advance(ref)
            if not self.stopping and self.should_stop():
                self._stop_all()
                if not self.workers_write:
                    break  # the driver writes nothing more; the workers are killed at close

    def _hand_out(self) -> None:
        while self.queue and self.idle and not self.stopping:
            shard, worker = self.queue.popleft(), self.idle.pop(0)
            # Ray pauses a worker that runs UPDATES_IN_FLIGHT iterations ahead of the driver.
            generator = (
                self.handles[worker]
                .play.options(
                    num_returns="streaming", _generator_backpressure_num_objects=UPDATES_IN_FLIGHT
                )
                .remote(self.run_id, shard.tasks)
            )
            sink = (
                None
                if self.workers_write
                else self.store.sink(
                    self.run_id, skip_finished=True, group_seconds=self.group_seconds
                )
            )
            self.playing[generator] = _Playing(shard, worker, sink)

    def _stop_all(self) -> None:
        self.stopping = True
        self.stats.end = "cancelled"
        for playing in self.playing.values():
            self.handles[playing.worker].stop.remote()

    def _advance(self, generator: Any) -> None:
        import ray
        from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

        playing = self.playing[generator]
        try:
            item = ray.get(next(generator))
        except StopIteration:
            del self.playing[generator]
            if playing.sink is not None:
                playing.sink.flush()
            self.idle.append(playing.worker)
            return
        except RayTaskError as exc:  # the worker's code raised: the run fails, as in one process
            cause = exc.cause if isinstance(exc.cause, BaseException) else None
            raise (cause or exc) from None
        except RayActorError as exc:
            del self.playing[generator]
            # What the dead worker sent goes in before its episodes are played again.
            if playing.sink is not None:
                playing.sink.flush()
            self._replay(playing, permanently=isinstance(exc, ActorDiedError))
            return
        if isinstance(item, ShardUpdate):
            self._record(playing, item)
        elif isinstance(item, ShardEnd):
            self.stats.policy_calls += item.policy_calls
            self.stats.policy_seconds += item.policy_seconds
            self.stats.batch_size = min(self.stats.batch_size, item.batch_size)

    def _record(self, playing: _Playing, update: ShardUpdate) -> None:
        if self.stopping and not self.workers_write:
            return
        if update.batch is not None:
            assert playing.sink is not None
            playing.sink.write(update.batch)
        self.stats.steps += update.steps
        for note in update.notes:
            self._note(f"worker {playing.worker + 1}: {note}")
        for record in update.finished:
            if record.key in self.counted:  # a replayed episode finished twice: counted once
                continue
            self.counted.add(record.key)
            self.stats.episodes += 1
            self.stats.correct += record.outcome == "correct"
            if self.on_episode is not None:
                self.on_episode(record, self.stats)

    def _replay(self, playing: _Playing, *, permanently: bool) -> None:
        shard = playing.shard
        left = tuple(t for t in shard.tasks if t.key not in self.counted)
        if permanently:
            self._note(f"worker {playing.worker + 1} is gone for good; playing on without it")
        else:
            now = time.monotonic()
            self.reviving[playing.worker] = (now, now + PROBE_EVERY_SECONDS)
        if not (self.idle or self.playing or self.reviving):
            raise FanoutError("every Ray worker is gone; see `ray status` and the Ray logs")
        if self.stopping:
            return
        if not left:
            # It died after its last episode came in, before it said its shard was done: a
            # death is told all the same (it restarts), with nothing to play again.
            self._note(f"worker {playing.worker + 1} died after its episodes finished")
            return
        if shard.attempt >= MAX_ATTEMPTS:
            raise FanoutError(
                f"a worker died {MAX_ATTEMPTS} times playing the same "
                f"{counted(len(left), 'episode')} (first {left[0].key}); see the Ray logs (killed "
                "for memory?)"
            )
        self._note(
            f"worker {playing.worker + 1} died; its {counted(len(left), 'unfinished episode')} "
            f"{'is' if len(left) == 1 else 'are'} played again from the first step"
        )
        self.queue.appendleft(_Shard(shard.number, left, shard.attempt + 1))

    def _probe(self) -> None:
        """Ask each restarting worker whose turn has come whether it is back."""
        now = time.monotonic()
        asked = set(self.probes.values())
        for worker, (died, next_probe) in list(self.reviving.items()):
            if worker in asked or now < next_probe:
                continue
            if now - died > REVIVE_SECONDS:
                raise FanoutError(
                    f"worker {worker + 1} did not come back within {REVIVE_SECONDS:.0f} s of "
                    "dying; see `ray status` (is there room for it?)"
                )
            self.probes[self.handles[worker].pid.remote()] = worker

    def _revived(self, probe: Any) -> None:
        import ray
        from ray.exceptions import ActorDiedError, RayActorError

        worker = self.probes.pop(probe)
        try:
            ray.get(probe)
        except ActorDiedError:
            del self.reviving[worker]
            self._note(f"worker {worker + 1} is gone for good; playing on without it")
            if not (self.idle or self.playing or self.reviving):
                raise FanoutError(
                    "every Ray worker is gone; see `ray status` and the Ray logs"
                ) from None
        except RayActorError:  # still restarting
            died, _ = self.reviving[worker]
            self.reviving[worker] = (died, time.monotonic() + PROBE_EVERY_SECONDS)
        else:
            del self.reviving[worker]
            self.idle.append(worker)

    def _note(self, text: str) -> None:
        self.stats.notes.append(text)
        if self.on_note is not None:
            self.on_note(text)
