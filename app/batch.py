"""A rollout batch job: build everything up front, then play the run into the store.

Everything that can fail on bad input (dataset, policy, store) fails before a run row exists,
so a mistake never leaves a run behind as "running".
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from rollout_core.errors import RollscopeError, SpecError
from rollout_core.policies.base import Policy
from rollout_core.policies.registry import make_policy
from rollout_core.records import EpisodeKey, EpisodeRecord, PolicyInfo, RunSpec
from rollout_core.runner import RunStats, plan_episodes, run_episodes
from rollout_core.specs import PlannedRun, RunRequest, build_spec, plan_stored
from storage import lifecycle
from storage.store import Store

HEARTBEAT_EVERY_SECONDS = 10.0
CANCEL_POLL_SECONDS = 2.0


class JobError(RollscopeError, RuntimeError):
    """A batch job could not start or finish; the message is one line for the user."""


class Cancelled(JobError):
    """The job was stopped by a signal or from the dashboard."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A run ready to play: its validated plan, the built policy and what it reported."""

    plan: PlannedRun
    policy: Policy
    info: PolicyInfo

    @property
    def spec(self) -> RunSpec:
        return self.plan.spec

    @property
    def planned(self) -> int:
        return self.plan.planned


def prepare(plan: PlannedRun) -> Prepared:
    """Build the run's policy from its settings alone; raises on any bad input."""
    policy = make_policy(plan.spec.policy, plan.spec.generation)
    return Prepared(plan, policy, policy.describe())


def start_run(store: Store, request: RunRequest) -> tuple[int, Prepared]:
    """Validate a request, build its policy, then create the run: nothing is written when any
    of that fails."""
    prepared = prepare(build_spec(request))
    run_id = store.create_run(
        prepared.spec, episodes_planned=prepared.planned, policy_info=prepared.info
    )
    return run_id, prepared


def reopen_run(store: Store, ref: str, *, resume: bool) -> tuple[int, Prepared, set[EpisodeKey]]:
    """A queued run (`--run-id`) or an unfinished one (`--resume`), claimed by this process.

    The policy is built before the run is touched; claiming it (status `running`, this host and
    pid) is one checked move, so two processes can never play the same run.
    """
    found = store.find_run(ref)
    if found is None:
        raise JobError(f"no run {ref!r} in the store (list them with `rollscope runs`)")
    if resume:
        refusal = lifecycle.resume_refusal(found.name, found.status)
        if refusal is not None:
            raise JobError(refusal)
    elif found.status != "queued":
        raise JobError(f"run {found.id} is {found.status}, not queued; use --resume {found.id}")
    try:
        spec = RunSpec.from_stored(found.spec)
    except SpecError as exc:
        raise JobError(f"run {found.name!r} cannot be played again: {exc}") from None
    if spec.kind == "training":
        raise JobError(
            f"run {found.name!r} was recorded by a trainer; continue it from the training "
            "script (app.trl.make_rollout_func(..., resume=True))"
        )
    prepared = prepare(plan_stored(spec))
    store.set_run_status(found.id, "running")
    store.set_policy_info(found.id, prepared.info)
    skip: set[EpisodeKey] = set()
    if resume:
        store.delete_unfinished_episodes(found.id)  # replayed from the start, same seeds
        skip = store.finished_keys(found.id)
    return found.id, prepared, skip


@contextmanager
def _stop_on_signals(flag: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM ask the job to stop after the current iteration's write."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if flag.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        flag.set()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _Heartbeat(threading.Thread):
    """Keeps the run's heartbeat fresh while a long policy call blocks the main thread."""

    def __init__(self, store: Store, run_id: int) -> None:
        super().__init__(daemon=True, name="rollscope-heartbeat")
        self.store, self.run_id = store, run_id
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_EVERY_SECONDS):
            # A missed beat is harmless: the next iteration's write beats too.
            with contextlib.suppress(Exception):
                self.store.heartbeat(self.run_id)


def play_run(
    store: Store,
    run_id: int,
    prepared: Prepared,
    *,
    skip: set[EpisodeKey] | None = None,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> RunStats:
    """Play a created run to its end and set its final status.

    Raises Cancelled when stopped (the run reads `cancelled`), JobError when the policy
    failed (the run reads `failed` with the error recorded).
    """
    spec = prepared.spec
    tasks = plan_episodes(
        prepared.plan.questions, spec.samples, spec.generation.seed, skip=skip or set()
    )
    stop = threading.Event()
    last_poll = [time.monotonic()]

    def should_stop() -> bool:
        if stop.is_set():
            return True
        if time.monotonic() - last_poll[0] > CANCEL_POLL_SECONDS:
            last_poll[0] = time.monotonic()
            run = store.get_run(run_id)
            if run is not None and run.status == "cancelled":  # cancelled from the dashboard
                stop.set()
        return stop.is_set()

    beat = _Heartbeat(store, run_id)
    beat.start()
    try:
        with _stop_on_signals(stop):
            stats = run_episodes(
                prepared.plan.dataset,
                tasks,
                prepared.policy,
                store.sink(run_id),
                batch_size=spec.generation.batch_size,
                environment=spec.environment,
                should_stop=should_stop,
                on_episode=on_episode,
                on_note=on_note,
            )
    except KeyboardInterrupt:
        store.set_run_status(run_id, "cancelled", error="interrupted by Ctrl-C")
        raise Cancelled("interrupted: the run is marked cancelled") from None
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        store.set_run_status(run_id, "failed", error=message)
        raise JobError(f"run failed: {message}") from exc
    finally:
        beat.stopped.set()
    if stats.end == "cancelled":
        store.set_run_status(run_id, "cancelled", error="stopped before the end")
        raise Cancelled(
            f"stopped: {stats.episodes} episodes written; the run is marked cancelled "
            f"(continue it with --resume {run_id})"
        )
    store.set_run_status(run_id, "completed")
    return stats
