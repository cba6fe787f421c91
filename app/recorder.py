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
a batch at a time: once `flush_every` are held, within `flush_seconds` of being recorded (a
background thread writes what waited that long, so a trainer's update phase does not hold a
step's rollouts back), at `flush()`, and at the end. The run reads `running` with a heartbeat
while the block runs, then `completed`, or `failed` with the error that left it (`cancelled`
for Ctrl-C). A Recorder never closed still writes what it holds when the interpreter exits,
but its run is not marked finished (it reads `interrupted` once its heartbeat stops).
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
from types import TracebackType
from typing import Any

from app.batch import _Heartbeat as Heartbeat  # the batch job's beat, reused as it is
from app.importers.rollouts import (
    CORRECT_AT,
    Numbering,
    OwnQuestions,
    Rollout,
    episode_records,
    question_key,
)
from app.importers.turns import last_user_text, message_turns
from rollout_core.clip import clip_repr, grouped
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
from storage.store import Store


class RecorderError(RollscopeError, ValueError):
    """A call the Recorder cannot record; the message says what to pass instead."""


class Recorder:
    """Records finished rollouts of any loop into one run of a store."""

    def __init__(
        self,
        store: Store | str,
        run: str,
        *,
        kind: RunKind = "batch",
        model: str | None = None,
        dataset: str = "",
        resume: bool = False,
        correct_at: float = CORRECT_AT,
        flush_every: int = 256,
        flush_seconds: float = 1.0,
    ) -> None:
        """`store`: a Store or its URL (a SQLite path). `run`: the run's name (unique in the
        store; with `resume`, an earlier run of that name recorded by a Recorder goes on).
        `kind`: `training` for a trainer's rollouts (Training and GRPO groups show them by
        step), `batch` otherwise. `correct_at`: an episode given no `correct` is correct when
        its reward is at least this."""
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
        every = _whole(flush_every, "flush_every")
        if every is None or every < 1:
            raise RecorderError(
                f"flush_every is {flush_every!r}: give the episodes held before a write, 1 or more"
            )
        self.flush_every = every
        self.flush_seconds = _finite(flush_seconds, "flush_seconds")
        if not 0 < self.flush_seconds <= MAX_FLUSH_SECONDS:
            raise RecorderError(
                f"flush_seconds is {self.flush_seconds}: give the seconds an episode may wait "
                f"for its write, above 0 and at most {MAX_FLUSH_SECONDS:.0f}"
            )
        self.store = store if isinstance(store, Store) else Store(store)
        found = self.store.run_named(run)
        if found is not None:
            if found.source_format == "recorder" and found.status == "running":
                # As a multi-GPU trainer's second process finds the first's run.
                raise RecorderError(
                    f"run {run!r} is being recorded now by another process ({_where(found)}); "
                    "a run has one Recorder: in a trainer of several processes, gather the "
                    "rollouts and record them on the main process (docs/import.md, 'One "
                    "process a run'), or give each process a run of its own"
                )
            if not resume:
                raise RecorderError(
                    f"a run named {run!r} already exists in this store; choose another name, or "
                    "pass resume=True to record more into it"
                )
            if found.source_format != "recorder":
                raise RecorderError(f"run {run!r} was not recorded by a Recorder; name another")
            refusal = lifecycle.resume_refusal(run, found.status)
            if refusal is not None:
                raise RecorderError(refusal)
            self.run_id = found.id
            self.store.set_run_status(self.run_id, "running")
        else:
            spec = RunSpec(
                name=run,
                policy=model or "recorder",
                dataset=dataset,
                questions_path="",
                db_dir="",
                kind=kind,
                checkpoint=model,
            )
            self.run_id = self.store.create_run(
                spec, episodes_planned=None, source_format="recorder"
            )
        self._own = OwnQuestions(self.store)
        if found is not None:  # questions rollscope has played since take its ids
            self._own.match(self.run_id)
        self._numbering = Numbering.of_run(self.store, self.run_id)
        self._sink = self.store.sink(self.run_id)
        self._started: list[EpisodeStart] = []
        self._steps: list[StepRecord] = []
        self._finished: list[EpisodeRecord] = []
        self._last_flush = time.monotonic()
        self._beat = Heartbeat(self.store, self.run_id)
        self._beat.start()
        self._closed = False
        # The loop's thread and the flusher's take turns on what is held.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_when_due, daemon=True, name="rollscope-recorder-flush"
        )
        self._flusher.start()
        atexit.register(self._flush_at_exit)

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
        """
        if self._closed:
            raise RecorderError("this Recorder is closed; open another to record more")
        total = _finite(reward, "reward")
        if rewards is not None and not isinstance(rewards, Mapping):
            raise RecorderError(
                f"rewards is {_shown(rewards)}: give the reward's parts by name, e.g. "
                "{'correct': 1.0, 'format': 0.5}"
            )
        parts = {str(k): _finite(v, f"rewards[{k!r}]") for k, v in (rewards or {}).items()}
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
        # Under the lock: the flusher may move the run's questions to new ids meanwhile.
        with self._lock:
            # A question rollscope's own runs know by its text: their id.
            qid = question_id if question_id is not None else self._own.id_of(question_key(text))
            start, steps, finish = episode_records(
                rollout,
                qid,
                self._numbering.sample(qid),
                self._numbering.group(train_step, qid, group),
                correct_at=self.correct_at,
            )
            self._started.append(start)
            self._steps.extend(steps)
            self._finished.append(finish)
            waited = time.monotonic() - self._last_flush
            if len(self._finished) >= self.flush_every or waited >= self.flush_seconds:
                self._write_held()

    def flush(self) -> None:
        """Write the episodes held now (one transaction)."""
        with self._lock:
            self._write_held()

    def close(self, status: RunStatus = "completed", error: str | None = None) -> None:
        """Write what is held and set the run's status (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        self._beat.stopped.set()
        self._stop.set()
        self._flusher.join()
        atexit.unregister(self._flush_at_exit)
        try:
            with self._lock:
                self._write_held()
        finally:
            self.store.set_run_status(self.run_id, status, error=error)

    def _write_held(self) -> None:
        """Write the episodes held, as one transaction, then match the run's questions to
        those rollscope's own runs have played since (the caller holds the lock)."""
        if self._finished:
            batch = IterationBatch(self._started, self._steps, self._finished)
            self._sink.write(batch)
            self._started, self._steps, self._finished = [], [], []
        self._last_flush = time.monotonic()
        if self._own.refresh() and self._own.match(self.run_id)[1]:
            # The moved samples are numbered after those already under the new ids.
            self._numbering = Numbering.of_run(self.store, self.run_id)

    def _flush_when_due(self) -> None:
        """The flusher thread: write what has waited `flush_seconds`, until close."""
        while not self._stop.wait(max(self.flush_seconds, _FLUSH_POLL_MIN)):
            # A failed write keeps what is held and is tried again at the next look; one that
            # keeps failing raises in the loop's own next write (`flush_every`, close).
            with contextlib.suppress(Exception), self._lock:
                if time.monotonic() - self._last_flush >= self.flush_seconds:
                    self._write_held()

    def _flush_at_exit(self) -> None:
        """A Recorder never closed: write what it holds as the interpreter exits."""
        self._stop.set()
        held = len(self._finished)
        try:
            with self._lock:
                self._write_held()
        except Exception as exc:  # nothing left to raise to: say so
            print(
                f"rollscope Recorder: {held} held episodes of run {self.run_id} could not be "
                f"written at exit ({type(exc).__name__}: {exc})",
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
