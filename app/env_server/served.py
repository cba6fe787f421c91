"""The run an environment server records into, and what each process serving it shares.

`open_run` opens the run (or takes it up again) once per server: `running` with a heartbeat
while it serves, `completed` when it stops. A server that was killed leaves its run reading
`interrupted`; started again with the same name it goes on with that run: the episodes its
sessions left unfinished end `abandoned` with their steps, and each question's sample indices
go on from the store's. Each process that serves the run (the server's own, or each of its
workers) has its own `ServedRun`: a writer, a sandbox and step threads, over the one numbering.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.batch import JobError
from app.batch import _Heartbeat as Heartbeat  # the batch job's beat, reused as it is
from app.env_server.models import EpisodeScore
from app.env_server.step_threads import StepThreads
from app.env_server.writer import GroupWriter
from rollout_core.datasets import Dataset
from rollout_core.episode import start_record
from rollout_core.failure_classes import repeated_actions
from rollout_core.records import (
    EpisodeKey,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    PolicyInfo,
    RunSpec,
)
from rollout_core.sandbox import Sandbox
from rollout_core.settings import EnvironmentSettings
from storage import lifecycle
from storage.read_models import EpisodeFilter
from storage.store import Store
from storage.trainer_scores import TrainerScore
from storage.training import counters

POLICY = "env-server"
"""The run's policy field: whatever its clients play, the server does not know."""
SPARE_STEP_THREADS = 7
"""Slow steps (a query up to the sandbox's deadline) played beside the lane's at most."""


class SampleNumbers:
    """Each question's next free sample index, in memory shared by the server's processes, so
    that two sessions never number an episode alike whichever process serves them."""

    def __init__(self, question_ids: list[str], start: dict[str, int]) -> None:
        self._position = {qid: i for i, qid in enumerate(question_ids)}
        context = multiprocessing.get_context("spawn")
        self._next = context.Array("q", [start.get(qid, 0) for qid in question_ids])

    def take(self, question_id: str) -> int:
        """The question's next index, never given again."""
        i = self._position[question_id]
        with self._next.get_lock():
            index = int(self._next[i])
            self._next[i] = index + 1
        return index


class Closable(Protocol):
    def close(self) -> None: ...


@dataclass
class ServedRun:
    """What one serving process's sessions share: the run, its numbering, one writer, one
    sandbox and the step threads."""

    store: Store
    run_id: int
    spec: RunSpec
    dataset: Dataset
    numbers: SampleNumbers
    writer: GroupWriter = field(init=False)
    sandbox: Sandbox = field(init=False)
    steps: StepThreads = field(default_factory=lambda: StepThreads(spares=SPARE_STEP_THREADS))
    """Where sessions play their steps: off the event loop, so a slow query holds one thread."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sessions: set[Closable] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.writer = GroupWriter(self.store.sink(self.run_id))
        self.sandbox = Sandbox(self.spec.environment.sandbox)

    @property
    def settings(self) -> EnvironmentSettings:
        return self.spec.environment

    def assign(
        self,
        question_id: str | None,
        seed: int | None,
        *,
        train_step: int | None = None,
        group_index: int | None = None,
    ) -> EpisodeStart:
        """The next episode: the question asked for (or one drawn with `seed`, as the original
        environment drew it), with the question's next free sample index."""
        if question_id is not None:
            question = self.dataset.by_id(question_id)
        else:
            question = random.Random(seed).choice(self.dataset.questions)
        index = self.numbers.take(question.id)
        # The seed the client gave, if any: the server samples nothing itself.
        return start_record(question, index, seed, train_step=train_step, group_index=group_index)

    def record_trainer_scores(self, scores: Sequence[EpisodeScore]) -> int:
        """Record a trainer's advantages and rewards on the run's episodes they name (by
        question and sample index); how many episodes of the run they scored."""
        keys = [EpisodeKey(s.question_id, s.sample_index) for s in scores]
        ids = self.store.episode_ids(self.run_id, keys)
        found = [
            TrainerScore(ids[key], s.advantage, dict(s.rewards))
            for key, s in zip(keys, scores, strict=True)
            if key in ids
        ]
        return self.store.record_trainer_scores(self.run_id, found)

    def mark_replayed(self, step: int) -> int:
        """Mark the run's episodes of `step` and later as replaced by a trainer resumed there
        (`storage.replayed`); how many were marked."""
        return self.store.mark_replayed(self.run_id, step)

    def opened(self, session: Closable) -> None:
        with self._lock:
            self._sessions.add(session)

    def closed(self, session: Closable) -> None:
        with self._lock:
            self._sessions.discard(session)

    def close(self) -> None:
        """End the sessions still open (their episodes abandoned), write what is queued and
        close the sandbox."""
        with self._lock:
            open_sessions = list(self._sessions)
        for session in open_sessions:
            session.close()
        self.steps.shutdown()
        self.writer.close()
        self.sandbox.close()


@dataclass
class OpenRun:
    """The server's run, opened once whatever the number of processes serving it."""

    store: Store
    run_id: int
    spec: RunSpec
    dataset: Dataset
    numbers: SampleNumbers
    abandoned_at_start: int
    """Episodes a killed server had left unfinished, ended `abandoned` when this one started."""
    _beat: Heartbeat

    def served(self) -> ServedRun:
        """What this process's sessions need to serve the run."""
        return ServedRun(self.store, self.run_id, self.spec, self.dataset, self.numbers)

    def complete(self) -> None:
        """Stop the heartbeat and mark the run completed (its sessions are all closed): an
        episode the store failed to finish (its session was told so) ends abandoned."""
        self._beat.stopped.set()
        if leftovers := _unfinished(self.store, self.run_id):
            self.store.sink(self.run_id).write(IterationBatch(finished=leftovers))
        self.store.set_run_status(self.run_id, "completed")


def open_run(store: Store, spec: RunSpec, dataset: Dataset) -> OpenRun:
    """Create the run `spec.name`, or go on with the env run of that name; JobError in one line
    when the name is another kind of run, one still served, or one of other settings."""
    found = store.run_named(spec.name)
    if found is None:
        run_id = store.create_run(spec, episodes_planned=None, policy_info=PolicyInfo(name=POLICY))
        next_sample: dict[str, int] = {}
        leftovers: list[EpisodeRecord] = []
    else:
        if found.kind != "env":
            raise JobError(
                f"a {found.kind} run named {spec.name!r} already exists in this store; "
                "choose another --name"
            )
        if found.status == "completed":
            raise JobError(
                f"env run {spec.name!r} is completed (its server was stopped); "
                "choose another --name"
            )
        refusal = lifecycle.resume_refusal(spec.name, found.status)
        if refusal is not None:
            raise JobError(refusal)
        stored = RunSpec.from_stored(found.spec)
        if _served_as(stored) != _served_as(spec):
            raise JobError(
                f"env run {spec.name!r} was served with dataset {stored.dataset!r} and other "
                "settings; start it with the same --dataset/--questions and --step-budget, "
                "or choose another --name"
            )
        run_id = found.id
        store.set_run_status(run_id, "running")
        next_sample = counters(store, run_id).next_sample
        leftovers = _unfinished(store, run_id)
        if leftovers:
            store.sink(run_id).write(IterationBatch(finished=leftovers))
    numbers = SampleNumbers([q.id for q in dataset.questions], next_sample)
    beat = Heartbeat(store, run_id)
    beat.start()
    return OpenRun(store, run_id, spec, dataset, numbers, len(leftovers), beat)


def _served_as(spec: RunSpec) -> tuple[object, ...]:
    """What must not change when a run is served again: its questions and environment (the
    demo's files are rebuilt per home folder, so it is known by its name)."""
    demo = spec.dataset.split(":")[0] == "demo"
    where = (spec.dataset,) if demo else (spec.questions_path, spec.db_dir)
    return (*where, spec.environment)


def _unfinished(store: Store, run_id: int) -> list[EpisodeRecord]:
    """The run's episodes a killed server left open, as abandoned records over their steps."""
    flt = EpisodeFilter(run_ids=(run_id,), finished_only=False)
    open_ids: list[int] = []
    cursor = None
    while True:
        page = store.list_episodes(flt, limit=500, cursor=cursor)
        open_ids += [e.id for e in page.items if e.outcome is None]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    records = []
    for detail in store.get_episodes(open_ids):
        steps = detail.steps
        ok = [s for s in steps if s.error is None]
        repeats = repeated_actions(steps)
        records.append(
            EpisodeRecord(
                detail.summary.question_id,
                detail.summary.sample_index,
                outcome="abandoned",
                reward=sum(s.reward for s in steps),
                progress=sum(s.reward for s in ok if s.action == "QUERY"),
                operational=float(len(ok) - repeats),
                steps=len(steps),
                answer=None,
                duration_seconds=None,  # its server was killed: nobody saw it end
                failure_class="abandoned",
            )
        )
    return records
