"""The write side: runner iterations (one, or several merged) into the store as one transaction."""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    Table,
    bindparam,
    delete,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from rollout_core.records import (
    ACTION_KINDS,
    EpisodeKey,
    EpisodeRecord,
    IterationBatch,
    StepRecord,
)
from storage.bulk_sql import executemany, executemany_values
from storage.classify import Finished, classify_stored
from storage.models import Episode, Run, Step
from storage.run_totals import DROPPED_COLUMNS, UNPARSED, RunChange
from storage.step_spans import ARGUMENT_COLUMNS, ERROR_COLUMNS, text_or_span
from storage.token_codec import encode_trace, trace_means

if TYPE_CHECKING:
    from storage.prompt_store import PromptWriter

T = TypeVar("T")

_EPISODES = cast(Table, Episode.__table__)
_RUNS = cast(Table, Run.__table__)
_INSERT_STEP = insert(cast(Table, Step.__table__))
# The write path's statements are built once: building and caching a statement per call cost
# as much as running it, at one transaction per runner iteration.
_HEARTBEAT = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(heartbeat_at=bindparam("b_now", type_=_RUNS.c.heartbeat_at.type))
)
_INSERT_EPISODES = insert(_EPISODES).returning(
    _EPISODES.c.id, _EPISODES.c.question_id, _EPISODES.c.sample_index
)

# Even with busy_timeout and BEGIN IMMEDIATE, SQLite can report "locked" (e.g. a checkpoint
# holding the WAL); retry a few times with growing pauses (0.1 s .. 1.6 s, ~3 s in all).
_LOCK_RETRIES = 5
_FIRST_PAUSE = 0.1


def now_utc() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def is_lock_error(exc: BaseException) -> bool:
    """True for SQLite's transient 'database is locked' / 'busy' failures."""
    text = str(getattr(exc, "orig", exc)).lower()
    return isinstance(exc, OperationalError) and ("locked" in text or "busy" in text)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a batch's write, back on after (if it was on).

    A write makes tens of thousands of short-lived containers (rows, layouts, histories),
    none in a cycle, so reference counting frees them all; the collector's passes over them
    took a fifth of the sink's time, and promoted them to older generations whose full
    passes walk the whole process. Safe with threads: each caller restores only what it found.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def retry_locked(fn: Callable[[], T]) -> T:
    """Run a whole transaction, again after a pause when SQLite says it is locked."""
    pause = _FIRST_PAUSE
    for attempt in range(_LOCK_RETRIES + 1):
        try:
            return fn()
        except OperationalError as exc:
            if attempt == _LOCK_RETRIES or not is_lock_error(exc):
                raise
            time.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")


def write_batch(
    session: Session,
    run_id: int,
    batch: IterationBatch,
    known: dict[EpisodeKey, int],
    prompts: PromptWriter,
) -> dict[EpisodeKey, int]:
    """Write a batch in the caller's transaction; returns the ids of the episodes it created.

    `prompts` encodes the steps' prompts; call its `commit` once the transaction has.
    """
    now = now_utc()
    beat = session.connection().execute(_HEARTBEAT, {"b_run": run_id, "b_now": now})
    if beat.rowcount == 0:
        raise ValueError(f"no run with id {run_id} in this store; create_run first")
    change = RunChange()
    created = _insert_started(session, run_id, batch, now, change)
    ids = {**known, **created}
    step_keys = [s.key for s in batch.steps]  # built once: a key is a new tuple each time
    wanted = {*step_keys, *(e.key for e in batch.finished)}
    ids.update(_lookup(session, run_id, wanted - ids.keys()))
    if missing := sorted(wanted - ids.keys()):
        raise ValueError(
            f"run {run_id} has no started episode {missing[0]}; send its EpisodeStart first"
        )
    if batch.steps:
        episode_ids = [ids[k] for k in step_keys]
        encoded = prompts.encode(session, batch, episode_ids)
        values = [
            _step_values(i, s, *p)
            for i, s, p in zip(episode_ids, batch.steps, encoded, strict=True)
        ]
        executemany_values(session, _INSERT_STEP, STEP_COLUMNS, values)
        _count_steps(session, episode_ids, batch.steps, change)
    if batch.finished:
        # A producer that did not classify its episodes: classified from the stored steps.
        unclassified = [
            Finished(ids[e.key], e.outcome, e.progress)
            for e in batch.finished
            if e.failure_class is None
        ]
        classes = classify_stored(session, unclassified) if unclassified else {}
        rows = [_finish_row(ids, e, now, classes) for e in batch.finished]
        change.finishing(
            session.connection(),
            [(r["b_id"], r["b_outcome"], r["b_failure_class"], r["b_reward"]) for r in rows],
        )
        executemany(session, _FINISH, rows)
    change.apply(session.connection(), run_id)
    return created


def finished_among(session: Session, run_id: int, keys: Sequence[EpisodeKey]) -> set[EpisodeKey]:
    """Which of these episodes of the run have finished already (in the caller's transaction)."""
    if not keys:
        return set()
    pairs = [(k.question_id, k.sample_index) for k in keys]
    rows = session.execute(
        select(Episode.question_id, Episode.sample_index).where(
            Episode.run_id == run_id,
            Episode.outcome.is_not(None),
            tuple_(Episode.question_id, Episode.sample_index).in_(pairs),
        )
    )
    return {EpisodeKey(q, s) for q, s in rows}


def merged(batches: Sequence[IterationBatch]) -> IterationBatch:
    """Consecutive batches as one: their starts, steps and finishes, each in order."""
    return IterationBatch(
        started=[s for b in batches for s in b.started],
        steps=[s for b in batches for s in b.steps],
        finished=[e for b in batches for e in b.finished],
    )


def without_keys(batch: IterationBatch, keys: set[EpisodeKey]) -> IterationBatch:
    """The batch minus every record of these episodes."""
    if not keys:
        return batch
    return IterationBatch(
        started=[s for s in batch.started if s.key not in keys],
        steps=[s for s in batch.steps if s.key not in keys],
        finished=[e for e in batch.finished if e.key not in keys],
    )


def _insert_started(
    session: Session, run_id: int, batch: IterationBatch, now: datetime, change: RunChange
) -> dict[EpisodeKey, int]:
    """Insert the batch's new episodes (what they replace leaves the run's numbers)."""
    if not batch.started:
        return {}
    keys = [(s.question_id, s.sample_index) for s in batch.started]
    if len(set(keys)) != len(keys):
        raise ValueError(f"run {run_id}: the same episode was started twice in one batch")
    # A resumed run replays episodes that never finished: the earlier attempt's rows go.
    gone = session.connection().execute(
        delete(_EPISODES)
        .where(
            _EPISODES.c.run_id == run_id,
            _EPISODES.c.outcome.is_(None),
            tuple_(_EPISODES.c.question_id, _EPISODES.c.sample_index).in_(keys),
        )
        .returning(*DROPPED_COLUMNS)
    )
    change.dropped(gone)
    rows = [
        {
            "run_id": run_id,
            "question_id": s.question_id,
            "sample_index": s.sample_index,
            "seed": s.seed,
            "db_id": s.db_id,
            "question": clean_text(s.question),
            "gold_sql": clean_text(s.gold_sql),
            "started_at": now,
            "forked_from": s.forked_from,
            "fork_step": s.fork_step,
        }
        for s in batch.started
    ]
    try:
        result = session.connection().execute(_INSERT_EPISODES, rows)
    except IntegrityError:
        raise ValueError(
            f"run {run_id} already has a finished episode among {keys[:3]!r}...; "
            "skip the keys Store.finished_keys returns when resuming"
        ) from None
    return {EpisodeKey(q, s): i for i, q, s in result}


def _lookup(session: Session, run_id: int, keys: Iterable[EpisodeKey]) -> dict[EpisodeKey, int]:
    pairs = [(k.question_id, k.sample_index) for k in keys]
    if not pairs:
        return {}
    rows = session.execute(
        select(Episode.id, Episode.question_id, Episode.sample_index).where(
            Episode.run_id == run_id,
            tuple_(Episode.question_id, Episode.sample_index).in_(pairs),
        )
    )
    return {EpisodeKey(q, s): i for i, q, s in rows}


@overload
def clean_text(value: str) -> str: ...
@overload
def clean_text(value: None) -> None: ...
@overload
def clean_text(value: str | None) -> str | None: ...
def clean_text(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL (psycopg raises DataError): U+FFFD stands in for it."""
    return value.replace("\x00", "\ufffd") if value and "\x00" in value else value


def clean_json(value: Any) -> Any:
    """`value` with NUL mapped to U+FFFD in every string (PostgreSQL JSON cannot hold it)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


STEP_COLUMNS = (
    "episode_id",
    "step_no",
    "prompt_layout",
    "prompt_sha256",
    "raw_output",
    "action",
    *ARGUMENT_COLUMNS,
    "parsed",
    "observation",
    *ERROR_COLUMNS,
    "reward",
    "done",
    "tokens_in",
    "tokens_out",
    "policy_seconds",
    "env_seconds",
    "truncated",
    "cached_tokens",
    "token_trace",
    "mean_logprob",
    "mean_entropy",
    "replayed",
)
"""A step row's columns in `_step_values`' order (the table's)."""


def _step_values(
    episode_id: int, s: StepRecord, prompt_layout: str, prompt_sha256: bytes
) -> tuple[Any, ...]:
    mean_logprob, mean_entropy = trace_means(s.tokens)
    raw_output, observation = clean_text(s.raw_output), clean_text(s.observation)
    return (
        episode_id,
        s.step_no,
        prompt_layout,
        prompt_sha256,
        raw_output,
        s.action,
        *text_or_span(raw_output, clean_text(s.argument)),
        s.parsed,
        observation,
        *text_or_span(observation, clean_text(s.error)),
        s.reward,
        s.done,
        s.tokens_in,
        s.tokens_out,
        s.policy_seconds,
        s.env_seconds,
        s.truncated,
        s.cached_tokens,
        None if s.tokens is None else encode_trace(s.tokens, s.raw_output),
        mean_logprob,
        mean_entropy,
        s.replayed,
    )


# Episode columns `<action>_steps` count the parsed steps of each action.
ACTION_COLUMNS = tuple(a.lower() for a in ACTION_KINDS)


def is_sql_error(step: StepRecord) -> bool:
    """A QUERY step the database (or the sandbox) refused."""
    return step.action == "QUERY" and step.error is not None


# Per-episode step counters, bumped in the same transaction as the steps they count.
_COUNT = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        steps=_EPISODES.c.steps + bindparam("b_steps", type_=Integer),
        unparsed_steps=_EPISODES.c.unparsed_steps + bindparam("b_unparsed", type_=Integer),
        has_unparsed=or_(_EPISODES.c.has_unparsed, bindparam("b_any_unparsed", type_=Boolean)),
        has_sql_error=or_(_EPISODES.c.has_sql_error, bindparam("b_sql_error", type_=Boolean)),
        **{
            f"{a}_steps": _EPISODES.c[f"{a}_steps"] + bindparam(f"b_{a}", type_=Integer)
            for a in ACTION_COLUMNS
        },
    )
)


_ZERO_COUNTS: dict[str, Any] = {"b_steps": 0, "b_unparsed": 0, "b_sql_error": False} | {
    f"b_{a}": 0 for a in ACTION_COLUMNS
}
_ACTION_PARAM = {a: f"b_{a.lower()}" for a in ACTION_KINDS}


def _count_steps(
    session: Session, episode_ids: Sequence[int], steps: Sequence[StepRecord], change: RunChange
) -> None:
    """Bump the episodes' step counters (`episode_ids`: each step's episode), and the run's."""
    counts: dict[int, dict[str, Any]] = {}
    for eid, s in zip(episode_ids, steps, strict=True):
        row = counts.get(eid)
        if row is None:
            row = counts[eid] = {"b_id": eid, **_ZERO_COUNTS}
        row["b_steps"] += 1
        if s.parsed:
            row[_ACTION_PARAM[s.action]] += 1
        else:
            row["b_unparsed"] += 1
        if not row["b_sql_error"] and is_sql_error(s):
            row["b_sql_error"] = True
    for row in counts.values():
        row["b_any_unparsed"] = row["b_unparsed"] > 0
    executemany(session, _COUNT, list(counts.values()))
    by_action = Counter[str]()
    for row in counts.values():
        by_action[UNPARSED] += row["b_unparsed"]
        for action in ACTION_KINDS:
            by_action[action] += row[_ACTION_PARAM[action]]
    change.steps(by_action)


_FINISH = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        outcome=bindparam("b_outcome"),
        reward=bindparam("b_reward", type_=Float),
        progress=bindparam("b_progress", type_=Float),
        operational=bindparam("b_operational", type_=Float),
        answer=bindparam("b_answer"),
        duration_seconds=bindparam("b_duration", type_=Float),
        error=bindparam("b_error"),
        failure_class=bindparam("b_failure_class"),
        ended_at=bindparam("b_ended_at", type_=_EPISODES.c.ended_at.type),
    )
)


def _finish_row(
    ids: dict[EpisodeKey, int], e: EpisodeRecord, now: datetime, classes: Mapping[int, str]
) -> dict[str, Any]:
    return {
        "b_id": ids[e.key],
        "b_failure_class": e.failure_class or classes[ids[e.key]],
        "b_outcome": e.outcome,
        "b_reward": e.reward,
        "b_progress": e.progress,
        "b_operational": e.operational,
        "b_answer": clean_text(e.answer),
        "b_duration": e.duration_seconds,
        "b_error": clean_text(e.error),
        "b_ended_at": now,
    }
