"""`Recorder`: the episodes of any loop, recorded in a store as one run.

For a loop of one's own (a `rollout_func` that plays its own environment, an evaluation
script): hand each finished rollout to `episode()` as its chat messages and its reward, and
the store shows it as every other run (Episodes, Replay, Compare; Training and GRPO groups
when the episodes carry their training step and group).

    from app.recorder import Recorder

    with Recorder("runs.db", run="grpo-sql-7b", kind="training") as rec:
        for step in range(steps):
            ...
            rec.episode(question=q, turns=messages, reward=r, step=step, group=g)

It is the importers' adapter (`app.importers.rollouts`) with a loop in place of a file: the
same turns-to-steps rules, the same records, the store's one sink. Episodes are written whole,
a batch at a time: once `flush_every` are held (the call that makes them so writes), within
`flush_seconds` of being recorded (a background thread writes what waited, so a trainer's
update phase does not hold a step's rollouts back), at `flush()`, and at the end. The run reads
`running` with a heartbeat while the block runs, then `completed`, or `failed` with the error
that left it (`cancelled` for Ctrl-C). A Recorder never closed still writes what it holds when
the interpreter exits, but its run is not marked finished (it reads `interrupted` once its
heartbeat stops).

Taken or refused, never half: `episode()` either returns, and the rollout is the Recorder's to
write, or raises a RecorderError, and nothing of it was kept (calling again records it once).
A write the store does not take (a server restarting, another writer's lock) keeps what it
held and is tried again in the background; only a write due by `flush_every` makes the loop
wait on the store. Once the store has taken no write for `retry_seconds`, or refused one
outright, `episode()` refuses rollouts, naming the cause, until a write goes through;
`close()` tries for `retry_seconds` more, then raises a RecorderError saying how many of the
rollouts it took are not in the store.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import operator
import sys
import threading
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError

from app.batch import _Heartbeat as Heartbeat  # the batch job's beat, reused as it is
from app.importers.rollouts import (
    CORRECT_AT,
    Numbering,
    OwnQuestions,
    Rollout,
    episode_records,
    question_key,
    turn_actions,
)
from app.importers.turns import last_user_text, message_turns
from rollout_core.actions import SQLAction
from rollout_core.clip import clip, clip_repr, grouped
from rollout_core.errors import RollscopeError, SpecError
from rollout_core.records import (
    ChatMessage,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    RunKind,
    RunSpec,
    RunStatus,
    StepRecord,
)
from rollout_core.specs import checked_run_name
from storage import lifecycle
from storage.models import INTEGER_RANGE
from storage.prompts import MAX_NESTING, messages_json, nested_deeper_than
from storage.read_models import RunSummary
from storage.store import DuplicateRunName, Store


class RecorderError(RollscopeError, ValueError):
    """A call the Recorder cannot record; the message says what to pass instead."""


@dataclass(frozen=True, slots=True)
class _Taken:
    """A rollout `episode()` took, numbered when it is written (the writer's thread)."""

    rollout: Rollout
    actions: list[SQLAction]


@dataclass(frozen=True, slots=True)
class _Trouble:
    """The store did not take the last write: why, and since when none went through."""

    error: Exception
    since: float
    """`time.monotonic()` at the first failed try since the last write."""
    may_pass: bool
    """Whether a later try may succeed (the store away or busy), not a refusal of the rows."""


class Recorder:
    """Records finished rollouts of any loop into one run of a store.

    `episode()` takes a rollout or refuses it (RecorderError), never half: a rollout taken is
    the Recorder's to write, through a store that is briefly away (retried for
    `retry_seconds`); a refused one was not kept, so calling again records it once.
    `close()` raises a RecorderError saying how many rollouts taken are not in the store,
    where some are not.
    """

    def __init__(
        self,
        store: Store | str,
        run: str,
        *,
        kind: RunKind = "batch",
        model: str | None = None,
        dataset: str = "",
        resume: bool = False,
        resumed_at_step: int | None = None,
        evaluation_of: str | None = None,
        correct_at: float = CORRECT_AT,
        flush_every: int = 256,
        flush_seconds: float = 1.0,
        retry_seconds: float = 60.0,
    ) -> None:
        """`store`: a Store or its URL (a SQLite path). `run`: the run's name (unique in the
        store; with `resume`, an earlier run of that name recorded by a Recorder goes on).
        `kind`: `training` for a trainer's rollouts (Training and GRPO groups show them by
        step), `batch` otherwise. `resumed_at_step`: with `resume`, the training step a loop
        resumed from a checkpoint begins at: the run's episodes of that step and later, which
        it plays again, are marked replaced (the Training page reads a step as its latest
        play). `evaluation_of`: for a `training` run of a loop's evaluation rollouts, the
        name of the training run whose checkpoints it evaluates (the Training pages of the
        two open each other). `correct_at`: an episode given no `correct` is correct when
        its reward is at least this. `retry_seconds`: how long a store that takes no write
        (a server restarting) is waited for before `episode()` refuses rollouts and `close()`
        gives up."""
        if kind not in ("batch", "training"):
            raise RecorderError(f"kind must be 'batch' or 'training', not {kind!r}")
        if not isinstance(run, str):
            raise RecorderError(f"run is {_shown(run)}: give the run's name as text")
        try:
            run = checked_run_name(run)  # as `--name` takes it: spaces around it dropped
        except SpecError as exc:
            raise RecorderError(str(exc)) from None
        # Checked before the run is made: a bad one would have failed later, on its thread.
        self.correct_at = _finite(correct_at, "correct_at")
        at_step = _whole(resumed_at_step, "resumed_at_step")
        if at_step is not None and not (resume and kind == "training"):
            raise RecorderError(
                "resumed_at_step marks the steps a resumed trainer plays again: give it with "
                "resume=True and kind='training'"
            )
        if evaluation_of is not None:
            if kind != "training":
                raise RecorderError(
                    "evaluation_of names the training run an evaluation's rollouts are of: "
                    "give it with kind='training' (each episode at the step it evaluated)"
                )
            if not isinstance(evaluation_of, str):
                raise RecorderError(
                    f"evaluation_of is {_shown(evaluation_of)}: give the training run's name"
                )
            try:
                evaluation_of = checked_run_name(evaluation_of)
            except SpecError as exc:
                raise RecorderError(f"evaluation_of: {exc}") from None
        every = _whole(flush_every, "flush_every")
        if every is None or every < 1:
            raise RecorderError(
                f"flush_every is {flush_every!r}: give the episodes held before a write, 1 or more"
            )
        self.flush_every = every
        self.flush_seconds = _seconds(
            flush_seconds, "flush_seconds", "the seconds an episode may wait for its write"
        )
        self.retry_seconds = _seconds(
            retry_seconds, "retry_seconds", "the seconds to wait for a store that takes no write"
        )
        self.store = store if isinstance(store, Store) else Store(store)
        spec = RunSpec(
            name=run,
            policy=model or "recorder",
            dataset=dataset,
            questions_path="",
            db_dir="",
            kind=kind,
            checkpoint=model,
            evaluation_of=evaluation_of,
        )
        self.run_id, reopened = self._open_run(spec, resume)
        if reopened and at_step is not None:
            self.store.mark_replayed(self.run_id, at_step)
        self._own = OwnQuestions(self.store)
        if reopened:  # questions rollscope has played since take its ids
            self._own.match(self.run_id)
        # The writer's alone (under `_write_lock`): numbering, question ids, what is unwritten.
        self._numbering: Numbering | None = Numbering.of_run(self.store, self.run_id)
        self._match_due = False
        # A batch tried again after a connection dropped at its commit may be in the store
        # already: found there, it is not written twice.
        self._sink = self.store.sink(self.run_id, skip_finished=True)
        self._started: list[EpisodeStart] = []
        self._steps: list[StepRecord] = []
        self._finished: list[EpisodeRecord] = []
        self._written = 0
        # Shared with the loop's thread (under `_lock`, never held over the store).
        self._queue: list[_Taken] = []
        self._taken = 0
        self._trouble: _Trouble | None = None
        self._last_try = time.monotonic()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._beat = Heartbeat(self.store, self.run_id)
        self._beat.start()
        self._closed = False
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_when_due, daemon=True, name="rollscope-recorder-flush"
        )
        self._flusher.start()
        atexit.register(self._flush_at_exit)

    def _open_run(self, spec: RunSpec, resume: bool) -> tuple[int, bool]:
        """The run's id, made here or (with `resume`) taken over; whether it was there."""
        found = self.store.run_named(spec.name)
        if found is None:
            try:
                made = self.store.create_run(spec, episodes_planned=None, source_format="recorder")
            except DuplicateRunName:
                # Another process made it since it was looked up (every rank of a multi-GPU
                # trainer opens the run at once): judged as a run found.
                found = self.store.run_named(spec.name)
                if found is None:
                    raise
            else:
                return made, False
        refusal = _open_refusal(found, resume)
        if refusal is not None:
            raise RecorderError(refusal)
        try:
            self.store.set_run_status(found.id, "running")
        except lifecycle.RunStateError:
            # Another process resumed it since it was looked up.
            now = self.store.run_named(spec.name) or found
            raise RecorderError(_open_refusal(now, resume) or _being_recorded(now)) from None
        return found.id, True

    def episode(
        self,
        *,
        question: str,
        turns: Sequence[Mapping[str, Any]],
        reward: float,
        rewards: Mapping[str, float] | None = None,
        correct: bool | None = None,
        step: int | None = None,
        group: Hashable | None = None,
        question_id: str | None = None,
        prompt: Sequence[Mapping[str, Any]] | None = None,
        db_id: str = "",
        gold_sql: str = "",
        seconds: float | None = None,
        tokens_out: int | None = None,
        mean_logprob: float | None = None,
        advantage: float | None = None,
        truncated: bool | None = None,
    ) -> None:
        """Record one finished rollout.

        `turns`: its chat messages (OpenAI format): the model's turns, each followed by the
        tool's or environment's reply; messages before the first assistant turn are its
        prompt (or pass `prompt`). Each assistant turn becomes a step, its SQL the step's
        action. `reward`: the rollout's total; `rewards`: its parts by name. `step`, `group`:
        the training step and the GRPO group (by default the question's samples at the step).
        `seconds`: how long the rollout took, if the loop timed it (else the store holds NULL).
        `tokens_out`: the tokens the model wrote over the rollout; `mean_logprob`: their mean
        log-probability (Training charts both), if the loop has them. `advantage`: the one
        the trainer gave the rollout, if the loop has it (GRPO groups shows it beside its own).
        `truncated`: whether the model's last output was cut at the length limit (a
        `finish_reason` of "length"); left out, the store holds NULL: nobody told.

        Returns once the rollout is taken: the Recorder writes it. A RecorderError means it
        was not taken: a call it cannot record, or a store that has taken no write for
        `retry_seconds` (or refused one); calling again once the store is back records it once.
        """
        if self._closed:
            raise RecorderError("this Recorder is closed; open another to record more")
        total = _finite(reward, "reward")
        parts = _reward_parts(rewards)
        verdict = _flag(
            correct,
            "correct",
            "give True or False, or leave it out to judge by the reward (correct at "
            f"{self.correct_at:g} or more)",
        )
        cut = _flag(
            truncated,
            "truncated",
            "give True where the model's last output was cut at the length limit (a "
            "finish_reason of 'length'), False where it ended on its own, or leave it out",
        )
        train_step = _stored(_whole(step, "step"), "step")
        took = None if seconds is None else _finite(seconds, "seconds")
        if took is not None and took < 0:
            raise RecorderError(f"seconds is {took}: give how long the rollout took, 0 or more")
        written = _stored(_whole(tokens_out, "tokens_out"), "tokens_out")
        if written is not None and written < 0:
            raise RecorderError(
                f"tokens_out is {written}: give the tokens the model wrote, 0 or more"
            )
        logprob = None if mean_logprob is None else _finite(mean_logprob, "mean_logprob")
        if logprob is not None and logprob > 0:
            raise RecorderError(
                f"mean_logprob is {logprob}: a log-probability is 0 or less (give the mean of "
                "the tokens' log-probabilities, not of their probabilities)"
            )
        given_advantage = None if advantage is None else _finite(advantage, "advantage")
        _check_text(question, "question", "the question's text")
        _check_text(question_id, "question_id", "an id, e.g. 'spider-dev-0042'", optional=True)
        _check_text(db_id, "db_id", "the database's name, e.g. 'concert_singer'")
        _check_text(gold_sql, "gold_sql", "the gold SQL query")
        try:
            hash(group)
        except TypeError:
            raise RecorderError(
                f"group is {_shown(group)}: give a hashable value (an int or a str, such as "
                "the framework's uid), or leave it out for the question's samples at the step"
            ) from None
        if not isinstance(turns, Iterable) or isinstance(turns, str | bytes | Mapping):
            raise RecorderError(
                f"turns is {_shown(turns)}: pass the rollout's chat messages, a list of dicts "
                "with 'role' and 'content'"
            )
        given = list(turns)
        # Held until the next write, a value JSON cannot hold failed that write and every later one.
        _check_json(given, "turns")
        try:
            lead, played = message_turns(given)
        except ValueError as exc:
            raise RecorderError(
                f"turns: {exc}; pass the rollout's chat messages as dicts with 'role' and 'content'"
            ) from None
        if not played:
            raise RecorderError(
                "turns holds no assistant message: pass the rollout's chat messages, e.g. "
                "[{'role': 'user', 'content': question}, {'role': 'assistant', 'content': ...}]"
            )
        if prompt is not None and (
            not isinstance(prompt, Sequence)
            or isinstance(prompt, str | bytes)
            or not all(isinstance(m, Mapping) for m in prompt)
        ):
            raise RecorderError(
                f"prompt is {_shown(prompt)}: pass the messages before the first assistant "
                "turn as dicts with 'role' and 'content'"
            )
        _check_json(prompt or (), "prompt")
        messages: list[ChatMessage] = [dict(m) for m in prompt or ()] + lead
        text = question or last_user_text(messages)
        try:
            rollout = Rollout(
                prompt=messages,
                turns=played,
                question=text,
                question_id=question_id,
                reward=total,
                rewards=parts,
                correct=verdict,
                truncated=cut,
                train_step=train_step,
                group=group,
                db_id=db_id,
                gold_sql=gold_sql,
                seconds=took,
                tokens_out=written,
                mean_logprob=logprob,
                advantage=given_advantage,
            )
        except ValueError as exc:  # an id or a reward's name the store cannot keep
            raise RecorderError(str(exc)) from None
        self._take(_Taken(rollout, turn_actions(played)))

    def flush(self) -> None:
        """Write the episodes held now (one transaction); RecorderError where the store did not
        take them (they stay held, and are tried again)."""
        error = self._try_write()
        if error is not None:
            raise RecorderError(
                f"the store did not take the write ({_cause(error)}); the "
                f"{self._unwritten()} rollouts not in it yet are kept and tried again"
            )

    def close(self, status: RunStatus = "completed", error: str | None = None) -> None:
        """Write what is held and set the run's status (once; later calls do nothing).

        A store that takes no write is tried for `retry_seconds`; then a RecorderError says how
        many of the rollouts taken are not in the store."""
        if self._closed:
            return
        self._closed = True
        self._beat.stopped.set()
        self._stop.set()
        self._flusher.join()
        atexit.unregister(self._flush_at_exit)
        give_up = time.monotonic() + self.retry_seconds  # for the write and the status both
        failed = self._write_until_taken(give_up)
        lost = None
        if failed is not None:
            lost = (
                f"{self._unwritten()} of the {self._taken} rollouts recorded could not be "
                f"written ({_cause(failed)})"
            )
            if status == "completed":
                status, error = "failed", lost
        unset = self._set_status_until_taken(status, error, give_up)
        if lost is None and unset is None:
            return
        if unset is not None:
            said = f"the run's status could not be set ({_cause(unset)}); it reads interrupted "
            said += "once this process ends"
            lost = f"{lost}; {said}" if lost else said
        raise RecorderError(lost)

    def _take(self, taken: _Taken) -> None:
        """Hold a rollout for its write, or refuse it before holding it (RecorderError); write
        now where `flush_every` are held and the store takes writes."""
        refusal = self._refusal()
        if refusal is not None:
            raise RecorderError(refusal)
        with self._lock:
            self._queue.append(taken)
            self._taken += 1
            due = len(self._queue) >= self.flush_every
        # While the store takes no write the flusher tries it again: the loop goes on.
        if due and self._trouble is None:
            self._try_write()

    def _refusal(self) -> str | None:
        """Why no rollout is taken now: the store refused a write, or took none for
        `retry_seconds`; None while it takes them, or is given time to again."""
        trouble = self._trouble
        if trouble is None:
            return None
        waited = time.monotonic() - trouble.since
        if trouble.may_pass and waited < self.retry_seconds:
            return None
        kept = (
            f"this rollout was not recorded (call again once the store is back); the "
            f"{self._unwritten()} recorded before it and not yet written are kept and written "
            "when the store takes them, or close() says they were not"
        )
        cause = _cause(trouble.error)
        if trouble.may_pass:
            return f"the store has taken no write for {waited:.0f} s ({cause}): {kept}"
        return f"the store refused the write of this run's episodes ({cause}): {kept}"

    def _try_write(self) -> Exception | None:
        """Write what waits for the store; the error it raised, if it did (what it did not take
        is kept for the next try)."""
        with self._write_lock:
            try:
                self._write()
            except Exception as exc:
                self._last_try = time.monotonic()
                before = self._trouble
                since = self._last_try if before is None else before.since
                self._trouble = _Trouble(exc, since, _may_pass(exc))
                return exc
            self._last_try = time.monotonic()
            self._trouble = None
            return None

    def _write(self) -> None:
        """Number the rollouts taken and write every episode not in the store yet, as one
        transaction; raises what the store raised (the caller holds `_write_lock`)."""
        if not self._finished:
            # Only while nothing numbered is unwritten: the numbering is read back after.
            self._match_own_questions()
        self._number_queued()
        if self._finished:
            count = len(self._finished)
            self._sink.write(IterationBatch(self._started, self._steps, self._finished))
            self._started, self._steps, self._finished = [], [], []
            self._written += count

    def _match_own_questions(self) -> None:
        """Give the run's questions the ids rollscope's own runs have played them under since."""
        if self._own.refresh():
            self._match_due = True
        if self._match_due:
            moved = self._own.match(self.run_id)[1]
            self._match_due = False
            if moved:  # the moved samples are numbered after those already under the new ids
                self._numbering = None

    def _number_queued(self) -> None:
        """Turn the rollouts taken into the records of numbered episodes, oldest first; those
        not numbered (a read of the store failed) go back to wait for the next write."""
        with self._lock:
            queued, self._queue = self._queue, []
        for done, taken in enumerate(queued):
            try:
                self._number(taken)
            except BaseException:
                with self._lock:
                    self._queue[:0] = queued[done:]
                raise

    def _number(self, taken: _Taken) -> None:
        rollout = taken.rollout
        if self._numbering is None:
            self._numbering = Numbering.of_run(self.store, self.run_id)
        # A question rollscope's own runs know by its text: their id.
        qid = rollout.question_id
        if qid is None:
            qid = self._own.id_of(question_key(rollout.question))
        # The group first: it may read the store, and a failed read leaves no sample used.
        group = self._numbering.group(rollout.train_step, qid, rollout.group)
        sample = self._numbering.sample(qid)
        start, steps, finish = episode_records(
            rollout, qid, sample, group, correct_at=self.correct_at, actions=taken.actions
        )
        self._started.append(start)
        self._steps.extend(steps)
        self._finished.append(finish)

    def _write_until_taken(self, give_up: float) -> Exception | None:
        """Write what is held, trying again until `give_up` (`time.monotonic()`) while the
        store is away; the last error if it never took it."""
        while True:
            error = self._try_write()
            if error is None or not _may_pass(error) or time.monotonic() >= give_up:
                return error
            time.sleep(RETRY_PAUSE_SECONDS)

    def _set_status_until_taken(
        self, status: RunStatus, error: str | None, give_up: float
    ) -> Exception | None:
        """Set the run's status, trying again until `give_up` while the store is away; the
        last error if it never took it (a refusal of the move itself raises)."""
        while True:
            try:
                self.store.set_run_status(self.run_id, status, error=error)
                return None
            except Exception as exc:
                if not _may_pass(exc):
                    raise
                if time.monotonic() >= give_up:
                    return exc
            time.sleep(RETRY_PAUSE_SECONDS)

    def _unwritten(self) -> int:
        """Rollouts taken that are not in the store yet."""
        return self._taken - self._written

    def _flush_when_due(self) -> None:
        """The flusher thread: write what has waited `flush_seconds` (the store's failed writes
        again, every `RETRY_PAUSE_SECONDS`), until close."""
        while not self._stop.wait(max(self._until_next_write(), _FLUSH_POLL_MIN)):
            if self._until_next_write() <= 0:
                self._try_write()

    def _until_next_write(self) -> float:
        """Seconds until the flusher's next write is due (0 or less: it is)."""
        pause = RETRY_PAUSE_SECONDS if self._trouble is not None else self.flush_seconds
        return self._last_try + pause - time.monotonic()

    def _flush_at_exit(self) -> None:
        """A Recorder never closed: write what it holds as the interpreter exits."""
        self._stop.set()
        error = self._try_write()
        if error is not None:  # nothing left to raise to: say so
            print(
                f"rollscope Recorder: {self._unwritten()} held episodes of run {self.run_id} "
                f"could not be written at exit ({_cause(error)})",
                file=sys.stderr,
            )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        elif isinstance(exc, KeyboardInterrupt):
            self.close("cancelled", "interrupted by Ctrl-C")
        else:
            self.close("failed", f"{type(exc).__name__}: {exc}".splitlines()[0])


_FLUSH_POLL_MIN = 0.05
"""Seconds between the flusher's looks at least, whatever `flush_seconds` says."""
MAX_FLUSH_SECONDS = 3600.0
"""An hour's wait at most: a longer one is no flush by time, and one past time_t overflows."""
RETRY_PAUSE_SECONDS = 1.0
"""Seconds between tries of a write the store did not take."""
_PASSING_SQLSTATES = frozenset({"08", "40", "53", "57"})
"""PostgreSQL's error classes a later try may get past: connection exception, transaction
rollback (a deadlock), insufficient resources, operator intervention (a server shut down)."""


def _may_pass(error: BaseException) -> bool:
    """Whether a later try of a write may succeed: the store could not be reached or was busy
    (a server restarting, a dropped connection, SQLite's lock held), not a refusal of its rows."""
    if getattr(error, "connection_invalidated", False):
        return True
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    state = getattr(error.orig, "sqlstate", None)
    return not isinstance(state, str) or state[:2] in _PASSING_SQLSTATES


def _cause(error: BaseException) -> str:
    """The error in a line: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    if not lines:
        return type(error).__name__
    return f"{type(error).__name__}: {clip(lines[0], 200)}"


def _open_refusal(found: RunSummary, resume: bool) -> str | None:
    """Why a Recorder cannot record into the run found under its name; None where it can."""
    if found.source_format == "recorder" and found.status == "running":
        # As a multi-GPU trainer's second process finds the first's run.
        return _being_recorded(found)
    resumable = found.source_format == "recorder" and found.status in lifecycle.RESUMABLE
    if not resume:
        offer = ", or pass resume=True to record more into it" if resumable else ""
        return (
            f"a run named {found.name!r} already exists in this store ({found.status}); choose "
            f"another name{offer}"
        )
    if found.source_format != "recorder":
        return f"run {found.name!r} was not recorded by a Recorder; name another"
    refusal = lifecycle.resume_refusal(found.name, found.status)
    if found.status == "completed":
        return f"{refusal}, and records no more; choose another name"
    return refusal


def _being_recorded(found: RunSummary) -> str:
    """The refusal of a run another Recorder records now, in this process or another."""
    if (found.host, found.pid) == lifecycle.this_process():
        return (
            f"run {found.name!r} is being recorded now by another Recorder in this process; "
            "record through that one, or close it before opening the run again"
        )
    return (
        f"run {found.name!r} is being recorded now by another process ({_where(found)}); "
        "a run has one Recorder: in a trainer of several processes, gather the "
        "rollouts and record them on the main process (docs/import.md, 'One "
        "process a run'), or give each process a run of its own"
    )


def _seconds(value: Any, what: str, meaning: str) -> float:
    """A setting in seconds, above 0 and at most `MAX_FLUSH_SECONDS`; RecorderError otherwise."""
    seconds = _finite(value, what)
    if not 0 < seconds <= MAX_FLUSH_SECONDS:
        raise RecorderError(
            f"{what} is {seconds}: give {meaning}, above 0 and at most {MAX_FLUSH_SECONDS:.0f}"
        )
    return seconds


def _reward_parts(rewards: Any) -> dict[str, float]:
    """The reward's parts by name as text; RecorderError for a name that is empty, or that is
    another's once written as text (1 and '1'): one of the two would be lost."""
    if rewards is None:
        return {}
    if not isinstance(rewards, Mapping):
        raise RecorderError(
            f"rewards is {_shown(rewards)}: give the reward's parts by name, e.g. "
            "{'correct': 1.0, 'format': 0.5}"
        )
    parts: dict[str, float] = {}
    keys: dict[str, Any] = {}
    for key, value in rewards.items():
        name = str(key)
        if not name.strip():
            raise RecorderError(
                f"rewards holds a part named {_shown(key)}: give each part a name, e.g. 'format'"
            )
        if name in keys:
            raise RecorderError(
                f"rewards holds {_shown(keys[name])} and {_shown(key)}, both named {name!r} "
                "in the store: give each part a name of its own"
            )
        keys[name] = key
        parts[name] = _finite(value, f"rewards[{key!r}]")
    return parts


def _finite(value: Any, what: str) -> float:
    """A number as a float (a numpy or torch scalar too); RecorderError unless finite."""
    if isinstance(value, str | bytes | bool):
        raise RecorderError(f"{what} is {_shown(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:
        raise RecorderError(f"{what} is {_shown(value)}, past what a float holds") from None
    except (TypeError, ValueError):
        raise RecorderError(f"{what} is {_shown(value)}, not a number") from None
    if not math.isfinite(number):
        raise RecorderError(f"{what} is {number}, not a finite number")
    return number


def _whole(value: Any, what: str) -> int | None:
    """A whole number as an int (a numpy or torch integer too), or None; RecorderError for
    anything else: a float, a bool, a string."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise RecorderError(f"{what} is {value!r}, not a whole number")
    try:
        return operator.index(value)
    except TypeError:
        raise RecorderError(f"{what} is {_shown(value)}, not a whole number") from None


def _flag(value: Any, what: str, hint: str) -> bool | None:
    """True or False (1 and 0, numpy's and torch's one-element bools too), or None;
    RecorderError for anything else: a string such as 'no' would read as True."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        with contextlib.suppress(ValueError, RuntimeError):  # more than one element
            return bool(value)
    raise RecorderError(f"{what} is {_shown(value)}: {hint}")


def _stored(value: int | None, what: str) -> int | None:
    """`value` where the store can hold it; RecorderError for a number past its range."""
    if value is not None and value not in INTEGER_RANGE:
        raise RecorderError(
            f"{what} is {grouped(value)}, out of range: the store holds whole numbers from "
            f"{INTEGER_RANGE.start:,} to {INTEGER_RANGE.stop - 1:,}"
        )
    return value


def _check_text(value: Any, what: str, example: str, *, optional: bool = False) -> None:
    if (value is None and optional) or isinstance(value, str):
        return
    raise RecorderError(f"{what} is {_shown(value)}, not text; pass {example}")


def _check_json(messages: Iterable[Mapping[str, Any]], what: str) -> None:
    """RecorderError naming the first of the messages' keys whose value the store cannot keep
    as JSON (bytes, a set, an object of the loop's own)."""
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            continue  # refused where the messages are read, as not a message at all
        for key, value in message.items():
            if nested_deeper_than(value, MAX_NESTING - 1):
                raise RecorderError(
                    f"{what}[{i}][{key!r}] nests lists or dicts more than {MAX_NESTING - 1} "
                    "levels deep, past what the store keeps"
                )
            try:
                messages_json([{key: value}])
            except (TypeError, ValueError):
                raise RecorderError(
                    f"{what}[{i}][{key!r}] is {_shown(value)}: messages are stored as JSON; give "
                    "text, numbers, lists and dicts"
                ) from None


def _shown(value: Any) -> str:
    return clip_repr(value, 40)


def _where(run: RunSummary) -> str:
    """The process a run's row says records it: pid and host, where it names them."""
    if run.pid is None:
        return "its heartbeat is live"
    return f"pid {run.pid}" + (f" on {run.host}" if run.host else "")
