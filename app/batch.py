"""A rollout batch job: build everything up front, then play the run into the store.

Everything that can fail on bad input (dataset, policy, store) fails before a run row exists,
so a mistake never leaves a run behind as "running".
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from app.forks import fork_tasks
from app.plural import counted
from app.stopping import stop_on_signals
from rollout_core.errors import RollscopeError, SpecError
from rollout_core.policies.base import Policy
from rollout_core.policies.registry import make_policy
from rollout_core.records import EpisodeKey, EpisodeRecord, PolicyInfo, RunSpec
from rollout_core.runner import EpisodeTask, RunStats, plan_episodes, run_episodes
from rollout_core.specs import PlannedRun, RunRequest, build_spec, plan_stored, questions_digest
from storage import lifecycle
from storage.read_models import RunSummary
from storage.store import DuplicateRunName, Store
from storage.writes import asked_as_stored

HEARTBEAT_EVERY_SECONDS = 10.0
_NAME_TRIES = 20
"""Numbered names tried after a made-up run name that is taken."""
SINK_GROUP_SECONDS = 0.25
"""A one-process run writes its iterations of this long as one transaction (`StoreSink`)."""
CANCEL_POLL_SECONDS = 2.0


class JobError(RollscopeError, RuntimeError):
    """A batch job could not start or finish; the message is one line for the user."""


class Cancelled(JobError):
    """The job was stopped by a signal or from the dashboard."""


class Fanout(Protocol):
    """Plays a run's episodes in other processes (Ray actors), each with its own policy."""

    def prepare(self, plan: PlannedRun) -> PolicyInfo:
        """Start the workers, each building the plan's policy; raises on bad input."""
        ...

    def play(
        self,
        store: Store,
        run_id: int,
        plan: PlannedRun,
        tasks: Sequence[EpisodeTask],
        *,
        should_stop: Callable[[], bool],
        on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
        on_note: Callable[[str], None] | None,
        group_seconds: float = 0.0,
    ) -> RunStats:
        """Play `tasks` into the run, every episode recorded once; stops the workers after.
        What the driver writes itself, it writes every `group_seconds` (`StoreSink`)."""
        ...

    def close(self) -> None:
        """Stop the workers (when the run cannot start after all); safe to call twice."""
        ...


@dataclass(frozen=True, slots=True)
class Prepared:
    """A run ready to play: its validated plan, the built policy and what it reported."""

    plan: PlannedRun
    policy: Policy | None
    """Built in this process; None when a fan-out's workers build their own."""
    info: PolicyInfo
    fanout: Fanout | None = None
    """Where the episodes are played when not here."""

    @property
    def spec(self) -> RunSpec:
        return self.plan.spec

    @property
    def planned(self) -> int:
        return self.plan.planned


def prepare(plan: PlannedRun, fanout: Fanout | None = None) -> Prepared:
    """Build the run's policy from its settings alone (here, or in each fan-out worker);
    raises on any bad input."""
    if fanout is not None:
        return Prepared(plan, None, fanout.prepare(plan), fanout)
    policy = make_policy(plan.spec.policy, plan.spec.generation)
    return Prepared(plan, policy, policy.describe())


def start_run(
    store: Store, request: RunRequest | PlannedRun, *, fanout: Fanout | None = None
) -> tuple[int, Prepared]:
    """Validate a request (a plan already is), build its policy, then create the run: nothing
    is written when any of that fails."""
    plan = request if isinstance(request, PlannedRun) else build_spec(request)
    named = isinstance(request, PlannedRun) or request.name is not None
    return record_run(store, prepare(plan, fanout), name_given=named)


def record_run(
    store: Store, prepared: Prepared, *, name_given: bool = True
) -> tuple[int, Prepared]:
    """Create the run of a prepared plan in the store: its id, and the plan as recorded. A
    name rollscope made up (no --name) that another run took meanwhile, as one started on
    another machine in the same second, is recorded with `-2`, `-3`, ... after it."""
    base = prepared.spec.name
    with _closed_on_error(prepared.fanout):
        for again in range(2, _NAME_TRIES + 2):
            try:
                run_id = store.create_run(
                    prepared.spec, episodes_planned=prepared.planned, policy_info=prepared.info
                )
                return run_id, prepared
            except DuplicateRunName:
                if name_given:
                    raise
                spec = dataclasses.replace(prepared.spec, name=f"{base}-{again}")
                prepared = dataclasses.replace(
                    prepared, plan=dataclasses.replace(prepared.plan, spec=spec)
                )
        raise JobError(f"runs named {base!r} and {base!r}-2 to -{_NAME_TRIES} exist; give --name")


def reopen_run(
    store: Store, ref: str, *, resume: bool, fanout: Fanout | None = None
) -> tuple[int, Prepared, set[EpisodeKey]]:
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
        again = f"; use --resume {found.id}" if found.status in lifecycle.RESUMABLE else ""
        raise JobError(f"run {found.id} is {found.status}, not queued{again}")
    if (elsewhere := _continued_elsewhere(found)) is not None:
        raise JobError(f"run {found.name!r} {elsewhere}")
    try:
        spec = RunSpec.from_stored(found.spec)
    except SpecError as exc:
        raise JobError(f"run {found.name!r} cannot be played again: {exc}") from None
    prepared = prepare(plan_stored(spec), fanout)
    with _closed_on_error(fanout):
        if resume and (changed := _changed_since(store, found, prepared.plan)) is not None:
            raise JobError(changed)
        if resume and (other := _other_model(found, prepared.info)) is not None:
            raise JobError(other)
        store.set_run_status(found.id, "running")
        store.set_policy_info(found.id, prepared.info)
        skip: set[EpisodeKey] = set()
        if resume:
            store.delete_unfinished_episodes(found.id)  # replayed from the start, same seeds
            skip = store.finished_keys(found.id)
    return found.id, prepared, skip


def _changed_since(store: Store, run: RunSummary, plan: PlannedRun) -> str | None:
    """Why the run's questions file no longer holds what the run played (a question it
    finished is gone from its questions, or reads another database, text or gold query) or
    planned to play (its questions are more or fewer, or others: their digest on the spec);
    None when it does. Played on, the run would mix two questions under one id, or end as
    completed without some of its own."""
    if run.episodes_planned is not None and plan.planned != run.episodes_planned:
        return (
            f"run {run.name!r} cannot be resumed: it planned {run.episodes_planned:,} episodes "
            f"and its questions ({plan.spec.dataset}) give {plan.planned:,} now: the file "
            "changed since; start a new run on it"
        )
    questions = {q.id: q for q in plan.questions}
    for qid, (db_id, text, gold) in store.played_questions(run.id).items():
        q = questions.get(qid)
        if q is None:
            what = "is no longer among its questions"
        elif asked_as_stored(q.db_id, q.question, q.gold_sql) != (db_id, text, gold):
            what = "reads another database, question or gold query there now"
        else:
            continue
        return (
            f"run {run.name!r} cannot be resumed: question {qid!r}, which it played, {what} "
            f"({plan.spec.dataset}: the file changed since); start a new run on it"
        )
    planned = plan.spec.questions_sha256
    if planned is not None and questions_digest(plan.questions) != planned:
        return (
            f"run {run.name!r} cannot be resumed: its questions ({plan.spec.dataset}) are not "
            "the ones it planned to play (the file changed since: a question it has yet to "
            "play was swapped or edited); start a new run on it"
        )
    return None


def _other_model(run: RunSummary, info: PolicyInfo) -> str | None:
    """Why the policy built to resume the run is not the model that played it (its checkpoint
    folder now holds other weights, as a training job's save does); None when it is, or when
    either side has no fingerprint."""
    before, now = run.checkpoint_fingerprint, info.fingerprint
    if before is None or now is None or before == now:
        return None
    return (
        f"run {run.name!r} cannot be resumed: its checkpoint {run.checkpoint or run.policy} holds "
        f"another model now (fingerprint {now}; the run played {before}); start a new run on it"
    )


def _continued_elsewhere(run: RunSummary) -> str | None:
    """How a run rollscope did not play goes on (its producer's way), or None for one
    `rollscope run` plays: a batch or a fork."""
    name = shlex.quote(run.name)
    if run.source_format == "recorder":
        return (
            "was recorded by a loop's Recorder; continue it from that loop "
            f"(Recorder(store, run={run.name!r}, resume=True))"
        )
    if run.kind == "import":
        return f"was imported; import again with `rollscope import PATH --name {name}`"
    if run.kind == "env":
        return (
            "was recorded by an environment server; serve it again with "
            f"`rollscope env-server --name {name}` and the same dataset"
        )
    if run.kind == "training":
        return (
            "was recorded by a trainer; continue it from the training script "
            "(app.trl.make_rollout_func(..., resume=True))"
        )
    return None


def _taken_over(store: Store, run_id: int) -> str | None:
    """The process that plays the run now, where a `--resume` elsewhere claimed it from this
    one; None while it is this process's."""
    with contextlib.suppress(Exception):  # a store that fails here failed the run too
        run = store.get_run(run_id)
        if run is not None and run.host and (run.host, run.pid) != lifecycle.this_process():
            return f"{run.host} pid {run.pid}"
    return None


def plan_tasks(store: Store, plan: PlannedRun, skip: set[EpisodeKey]) -> list[EpisodeTask]:
    """The episodes a run still has to play: every (question, sample), or for a fork each
    recorded episode continued, with its recorded steps (read from the store)."""
    if plan.spec.fork is not None:
        return fork_tasks(store, plan, skip)
    return plan_episodes(plan.questions, plan.spec.samples, plan.spec.generation.seed, skip=skip)


@contextmanager
def _closed_on_error(fanout: Fanout | None) -> Iterator[None]:
    """A fan-out's workers stop when the run they were started for cannot begin."""
    try:
        yield
    except BaseException:
        if fanout is not None:
            fanout.close()
        raise


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
    stop = threading.Event()
    # The handlers are set from the run's first moment until its last status is written: a
    # stop while the episodes are planned, or once they are in, waits for it (the default
    # SIGTERM would leave the run `running`).
    with stop_on_signals(stop):
        try:
            tasks = plan_tasks(store, prepared.plan, skip or set())
        except RollscopeError as exc:  # a fork whose source is gone: the run cannot start
            store.set_run_status(run_id, "failed", error=str(exc))
            raise JobError(f"run failed: {exc}") from exc
        except KeyboardInterrupt:
            store.set_run_status(run_id, "cancelled", error="interrupted by Ctrl-C")
            raise Cancelled("interrupted: the run is marked cancelled") from None
        return _play_planned(store, run_id, prepared, tasks, stop, on_episode, on_note)


def _play_planned(
    store: Store,
    run_id: int,
    prepared: Prepared,
    tasks: list[EpisodeTask],
    stop: threading.Event,
    on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
    on_note: Callable[[str], None] | None,
) -> RunStats:
    """Play the planned episodes until they are done or `stop` is set, and set the run's
    final status."""
    spec = prepared.spec
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
        if prepared.fanout is not None:
            stats = prepared.fanout.play(
                store, run_id, prepared.plan, tasks,
                should_stop=should_stop, on_episode=on_episode, on_note=on_note,
                group_seconds=SINK_GROUP_SECONDS,
            )  # fmt: skip
        else:
            assert prepared.policy is not None  # prepare() builds it when not fanned out
            with store.sink(run_id, group_seconds=SINK_GROUP_SECONDS) as sink:
                stats = run_episodes(
                    prepared.plan.dataset,
                    tasks,
                    prepared.policy,
                    sink,
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
        if (owner := _taken_over(store, run_id)) is not None:
            # A --resume elsewhere judged this process gone (paused past the heartbeat's
            # staleness) and dropped its unfinished episodes: the run is that process's now.
            raise JobError(
                f"run {spec.name!r} was taken over by {owner} while this process was paused; "
                "this process stops and leaves the run to it"
            ) from None
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        # A store that cannot take even this (a full disk) leaves the run `running`: it
        # reads `interrupted` once this process is gone, and --resume takes it over all
        # the same.
        with contextlib.suppress(Exception):
            store.set_run_status(run_id, "failed", error=message)
        raise JobError(f"run failed: {message}") from exc
    finally:
        beat.stopped.set()
    if stats.end == "cancelled":
        store.set_run_status(run_id, "cancelled", error="stopped before the end")
        raise Cancelled(
            f"stopped: {counted(stats.episodes, 'episode')} written; the run is marked "
            f"cancelled (continue it with --resume {run_id})"
        )
    store.set_run_status(run_id, "completed")
    return stats
