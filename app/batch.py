"""A rollout batch job: build everything up front, then play the run into the store.

Everything that can fail on bad input (dataset, policy, store) fails before a run row exists,
so a mistake never leaves a run behind as "running".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rollout_core.checkpoints import fingerprint_checkpoint
from rollout_core.datasets import Dataset, load_dataset, load_named_dataset, select_questions
from rollout_core.policies.base import Policy
from rollout_core.policies.registry import make_policy, split_spec
from rollout_core.records import EpisodeRecord, RunSpec
from rollout_core.runner import RunStats, plan_episodes, run_episodes
from rollout_core.settings import GenerationSettings
from storage.read_models import RunSummary
from storage.store import Store

HEARTBEAT_EVERY_SECONDS = 10.0
CANCEL_POLL_SECONDS = 2.0


class JobError(RuntimeError):
    """A batch job could not start or finish; the message is one line for the user."""


class Cancelled(JobError):
    """The job was stopped by a signal or from the dashboard."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A run ready to play: its spec, the loaded dataset and the built policy."""

    spec: RunSpec
    dataset: Dataset
    policy: Policy
    planned: int


def resolve_dataset(dataset: str | None, questions: str | None, db_dir: str | None) -> Dataset:
    """`--dataset demo` (or a path) or `--questions FILE [--db-dir DIR]`."""
    if questions:
        return load_dataset(questions, db_dir)
    return load_named_dataset(dataset or "demo")


def dataset_for_spec(spec: RunSpec) -> Dataset:
    """The dataset a stored run was made on (a named split reloads as that split)."""
    if spec.dataset.split(":")[0] == "demo":
        return load_named_dataset(spec.dataset)
    return load_dataset(spec.questions_path, spec.db_dir)


def generation_settings(spec: RunSpec) -> GenerationSettings:
    """The typed generation settings of a run."""
    known = set(GenerationSettings.__dataclass_fields__)
    values = {k: v for k, v in spec.generation.items() if k in known and v is not None}
    return GenerationSettings(**{**values, "batch_size": spec.batch_size, "seed": spec.seed})


def prepare(spec: RunSpec, dataset: Dataset) -> Prepared:
    """Build the policy and count the episodes; raises on any bad input."""
    if int(spec.environment.get("step_budget", 1)) < 1:
        raise JobError("--step-budget must be at least 1")
    if spec.batch_size < 1:
        raise JobError("--batch-size must be at least 1")
    if spec.samples < 1:
        raise JobError("--samples must be at least 1")
    questions = select_questions(dataset, limit=spec.limit, question_ids=spec.question_ids)
    policy = make_policy(spec.policy, generation_settings(spec))
    name, arg = split_spec(spec.policy)
    if name == "hf" and arg and not spec.checkpoint_fingerprint:
        spec = dataclasses.replace(
            spec, checkpoint=arg, checkpoint_fingerprint=fingerprint_checkpoint(arg)
        )
    return Prepared(spec, dataset, policy, planned=len(questions) * spec.samples)


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
    skip: set[tuple[str, int]] | None = None,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> RunStats:
    """Play a created run to its end and set its final status.

    Raises Cancelled when stopped (the run reads `cancelled`), JobError when the policy
    failed (the run reads `failed` with the error recorded).
    """
    spec = prepared.spec
    questions = select_questions(prepared.dataset, limit=spec.limit, question_ids=spec.question_ids)
    tasks = plan_episodes(questions, spec.samples, spec.seed, skip=skip or set())
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
                prepared.dataset,
                tasks,
                prepared.policy,
                store.sink(run_id),
                batch_size=spec.batch_size,
                step_budget=int(spec.environment.get("step_budget", 10)),
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


def run_is_live(run: RunSummary) -> bool:
    """Whether a `running` run's process may still be playing it.

    On this host the pid answers directly, so a run killed a second ago can be resumed at
    once; elsewhere only a fresh heartbeat (the store reads a stale one as interrupted) tells.
    """
    if run.status != "running":
        return False
    if run.host != socket.gethostname() or run.pid is None:
        return True
    try:
        os.kill(run.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def default_run_name(policy: str, dataset: str) -> str:
    name, arg = split_spec(policy)
    label = Path(arg).name if arg else name
    return f"{label}-{Path(dataset).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
