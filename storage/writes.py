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
    Connection,
    Integer,
    Table,
    bindparam,
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
from storage.bulk_sql import executemany, executemany_values, insert_returning
from storage.classify import Finished, classify_stored
from storage.models import Episode, Run, Step
from storage.run_totals import DROPPED_COLUMNS, UNPARSED, RunChange
from storage.step_spans import ARGUMENT_COLUMNS, ERROR_COLUMNS, text_or_span
from storage.token_codec import encode_trace, trace_means

if TYPE_CHECKING:
    from storage.prompt_layout import StepText
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
    step_keys = [s.key for s in batch.steps]  # built once: a key is a new tuple each time
    counts = _step_counts(step_keys, batch.steps)
    change.steps(_by_action(counts.values()))
    # An episode that starts in this batch is inserted with its counters over the batch's
    # steps, and one that finishes in it too (most of them, when a sink groups a run's
    # iterations) with its outcome: the counter and finish UPDATEs rewrote most of the
    # episode indexes twice, and cost more than the insert. One the store must classify
    # from its steps is finished as the others are, once its steps are in.
    started = {s.key for s in batch.started}
    finished = [(e.key, e) for e in batch.finished]
    whole = {k: e for k, e in finished if k in started and e.failure_class}
    created = _insert_started(session, run_id, batch, now, change, whole, counts)
    ids = {**known, **created}
    wanted = {*step_keys, *(k for k, _ in finished)}
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
        executemany_values(session, _INSERT_STEP, STEP_COLUMNS, values, floats_exact=True)
        counted = [
            {"b_id": ids[k]} | {f"b_{c}": n for c, n in row.items()}
            for k, row in counts.items()
            if k not in started
        ]
        executemany(session, _COUNT, counted)
    for k, e in whole.items():
        change.finished(e.outcome, e.failure_class, e.reward, counts.get(k, _ZERO)["steps"])
    if rest := [(ids[k], e) for k, e in finished if k not in whole]:
        # A producer that did not classify its episodes: classified from the stored steps.
        unclassified = [
            Finished(i, e.outcome, e.progress) for i, e in rest if e.failure_class is None
        ]
        classes = classify_stored(session, unclassified) if unclassified else {}
        rows = [_finish_row(i, e, now, classes) for i, e in rest]
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
    session: Session,
    run_id: int,
    batch: IterationBatch,
    now: datetime,
    change: RunChange,
    whole: Mapping[EpisodeKey, EpisodeRecord],
    counts: Mapping[EpisodeKey, dict[str, Any]],
) -> dict[EpisodeKey, int]:
    """Insert the batch's new episodes (what they replace leaves the run's numbers); those in
    `whole` finished in this batch too, and go in with their outcomes. Each goes in with its
    step counters over the batch's steps: all of its steps so far."""
    if not batch.started:
        return {}
    keys = [(s.question_id, s.sample_index) for s in batch.started]
    if len(set(keys)) != len(keys):
        raise ValueError(f"run {run_id}: the same episode was started twice in one batch")
    # A resumed run replays episodes that never finished: the earlier attempt's rows go.
    change.dropped(_delete_unfinished(session.connection(), run_id, keys))
    rows = [
        (
            run_id,
            s.question_id,
            s.sample_index,
            s.seed,
            s.db_id,
            clean_text(s.question),
            clean_text(s.gold_sql),
            now,
            s.forked_from,
            s.fork_step,
            *counts.get(s.key, _ZERO).values(),
            *(_NOT_FINISHED if (e := whole.get(s.key)) is None else _outcome(e, now)),
        )
        for s in batch.started
    ]
    try:
        inserted = insert_returning(
            session, _EPISODES, _EPISODE_COLUMNS, rows, ("id", "question_id", "sample_index")
        )
    except IntegrityError:
        raise ValueError(
            f"run {run_id} already has a finished episode among {keys[:3]!r}...; "
            "skip the keys Store.finished_keys returns when resuming"
        ) from None
    return {EpisodeKey(q, s): i for i, q, s in inserted}


_DELETE_CHUNK = 1024
"""Keys per DELETE at most: two parameters each, well under either database's limit."""


def _delete_unfinished(
    conn: Connection, run_id: int, keys: Sequence[tuple[str, int]]
) -> list[Sequence[Any]]:
    """Delete the run's unfinished episodes of these keys; their `DROPPED_COLUMNS`."""
    # Driver SQL: SQLAlchemy expanding the (question, sample) IN list cost ten times the
    # DELETE itself, which finds nothing but on a resume.
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    dropped = ", ".join(c.name for c in DROPPED_COLUMNS)
    gone: list[Sequence[Any]] = []
    for start in range(0, len(keys), _DELETE_CHUNK):
        chunk = keys[start : start + _DELETE_CHUNK]
        # Padded to a power of two with its last key (a repeat changes nothing): a few
        # statement texts, each prepared once (`bulk_sql.chunks`).
        size = 1 << (len(chunk) - 1).bit_length()
        padded = [*chunk, *[chunk[-1]] * (size - len(chunk))]
        # IN (VALUES ...): PostgreSQL parses a plain list of row values as nested ORs, and
        # thousands of them exceed its stack depth.
        pairs = ", ".join([f"({mark}, {mark})"] * size)
        gone += conn.exec_driver_sql(
            f"DELETE FROM episodes WHERE run_id = {mark} AND outcome IS NULL "
            f"AND (question_id, sample_index) IN (VALUES {pairs}) RETURNING {dropped}",
            (run_id, *(v for k in padded for v in k)),
        ).all()
    return gone


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
    episode_id: int, s: StepRecord, prompt_layout: str, prompt_sha256: bytes, text: StepText
) -> tuple[Any, ...]:
    """A step's row, in `STEP_COLUMNS`' order (`text`: its output and observation, cleaned);
    its floats made floats (numpy scalars reach the store), as `executemany_values` then
    takes them as they are."""
    mean_logprob, mean_entropy = (None, None) if s.tokens is None else trace_means(s.tokens)
    raw_output, observation = text
    error = None if s.error is None else clean_text(s.error)
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
        *((None, None, None) if error is None else text_or_span(observation, error)),
        float(s.reward),
        s.done,
        s.tokens_in,
        s.tokens_out,
        float(s.policy_seconds),
        float(s.env_seconds),
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


# An episode's step counters: the steps, the unparsed ones, the parsed ones per action.
COUNTER_COLUMNS = ("steps", "unparsed_steps", *(f"{a}_steps" for a in ACTION_COLUMNS))
_ZERO: dict[str, Any] = dict.fromkeys(COUNTER_COLUMNS, 0) | {
    "has_unparsed": False,
    "has_sql_error": False,
}
"""An episode's counter columns before its first step."""
_ACTION_COLUMN = {a: f"{a.lower()}_steps" for a in ACTION_KINDS}

# Bumps an episode's counters by a batch's steps, in the same transaction as those steps.
_COUNT = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        **{c: _EPISODES.c[c] + bindparam(f"b_{c}", type_=Integer) for c in COUNTER_COLUMNS},
        **{
            c: or_(_EPISODES.c[c], bindparam(f"b_{c}", type_=Boolean))
            for c in ("has_unparsed", "has_sql_error")
        },
    )
)


def _step_counts(
    keys: Sequence[EpisodeKey], steps: Sequence[StepRecord]
) -> dict[EpisodeKey, dict[str, Any]]:
    """Each episode's counter columns over these steps (`keys`: each step's episode)."""
    counts: dict[EpisodeKey, dict[str, Any]] = {}
    for key, s in zip(keys, steps, strict=True):
        row = counts.get(key)
        if row is None:
            row = counts[key] = _ZERO.copy()
        row["steps"] += 1
        if s.parsed:
            row[_ACTION_COLUMN[s.action]] += 1
        else:
            row["unparsed_steps"] += 1
            row["has_unparsed"] = True
        if not row["has_sql_error"] and is_sql_error(s):
            row["has_sql_error"] = True
    return counts


def _by_action(counts: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The steps counted, by action (`UNPARSED`: those with none), for the run's totals."""
    by_action = Counter[str]()
    for row in counts:
        by_action[UNPARSED] += row["unparsed_steps"]
        for action, column in _ACTION_COLUMN.items():
            by_action[action] += row[column]
    return by_action


OUTCOME_COLUMNS = (
    "outcome",
    "reward",
    "progress",
    "operational",
    "answer",
    "duration_seconds",
    "error",
    "failure_class",
    "ended_at",
)
"""An episode's columns that stay NULL until it finishes."""


def _outcome(e: EpisodeRecord, now: datetime, failure_class: str | None = None) -> tuple[Any, ...]:
    """A finished episode's `OUTCOME_COLUMNS` (`failure_class`: the store's, if it had none)."""
    return (
        e.outcome,
        e.reward,
        e.progress,
        e.operational,
        clean_text(e.answer),
        e.duration_seconds,
        clean_text(e.error),
        e.failure_class or failure_class,
        now,
    )


_NOT_FINISHED = (None,) * len(OUTCOME_COLUMNS)
_EPISODE_COLUMNS = (
    "run_id",
    "question_id",
    "sample_index",
    "seed",
    "db_id",
    "question",
    "gold_sql",
    "started_at",
    "forked_from",
    "fork_step",
    *_ZERO,
    *OUTCOME_COLUMNS,
)
"""A new episode's columns, in the order of `_insert_started`'s values."""

# Finishes an episode inserted in an earlier batch.
_FINISH = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values({c: bindparam(f"b_{c}", type_=_EPISODES.c[c].type) for c in OUTCOME_COLUMNS})
)
_FINISH_KEYS = tuple(f"b_{c}" for c in OUTCOME_COLUMNS)


def _finish_row(
    episode_id: int, e: EpisodeRecord, now: datetime, classes: Mapping[int, str]
) -> dict[str, Any]:
    outcome = _outcome(e, now, None if e.failure_class else classes[episode_id])
    return {"b_id": episode_id} | dict(zip(_FINISH_KEYS, outcome, strict=True))
