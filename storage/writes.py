"""The write side: runner iterations (one, or several merged) into the store as one transaction."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from rollout_core.heap_limit import heap_ceiling
from rollout_core.records import (
    EpisodeKey,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    StepRecord,
)
from storage.bulk_sql import (
    chunks,
    executemany,
    executemany_values,
    fetch_driver,
    insert_returning,
)
from storage.classify import Finished, classify_stored
from storage.episode_rows import (
    COUNT_PARAMETERS,
    COUNT_STEPS,
    EPISODE_COLUMNS,
    FINISH_EPISODE,
    NOT_FINISHED,
    ZERO_COUNTS,
    by_action,
    finish_row,
    outcome_values,
    step_counts,
)
from storage.imports import write_extras
from storage.models import Episode, Run, Step
from storage.run_totals import COUNTED_COLUMNS, RunChange
from storage.text_clean import clean_text
from storage.text_search import index_episodes
from storage.token_codec import encode_trace, trace_means

if TYPE_CHECKING:
    from storage.prompts import PromptEncoder, StoredPrompt

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
_HEAP_WAIT_SECONDS = 5.0
"""Longest wait for a sandboxed statement to end (its deadline ends it) before a write that
ran out of SQLite heap tries again."""


def asked_as_stored(db_id: str, question: str, gold_sql: str) -> tuple[str | None, str, str | None]:
    """An episode's database, question and gold SQL as its row holds them: an empty name or
    gold query as NULL (no name, as plain SQL reads it), what neither database can store in
    text as U+FFFD (`clean_text`)."""
    return db_id or None, clean_text(question), clean_text(gold_sql) or None


def now_utc() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def is_lock_error(exc: BaseException) -> bool:
    """True for SQLite's transient 'database is locked' / 'busy' failures."""
    text = str(getattr(exc, "orig", exc)).lower()
    return isinstance(exc, OperationalError) and ("locked" in text or "busy" in text)


def retry_locked(fn: Callable[[], T]) -> T:
    """Run a whole transaction, again after a pause when SQLite says it is locked, or when it
    ran out of heap while the sandbox's statements held the process's SQLite heap limit."""
    pause = _FIRST_PAUSE
    for attempt in range(_LOCK_RETRIES + 1):
        try:
            return fn()
        except OperationalError as exc:
            if attempt == _LOCK_RETRIES or not is_lock_error(exc):
                raise
            time.sleep(pause)
            pause *= 2
        except MemoryError:
            # SQLite's heap limit is one per process: an environment server's store writes
            # share it with the untrusted queries its sessions run on other threads.
            ceiling = heap_ceiling()
            if attempt == _LOCK_RETRIES or ceiling is None:
                raise
            ceiling.wait_for_statements(_HEAP_WAIT_SECONDS)
    raise AssertionError("unreachable")


def write_batch(
    session: Session,
    run_id: int,
    batch: IterationBatch,
    known: dict[EpisodeKey, int],
    prompts: PromptEncoder,
) -> dict[EpisodeKey, int]:
    """Write a batch in the caller's transaction; returns the ids of the episodes it created.

    `prompts` encodes the steps' prompts; call its `commit` once the transaction has. The
    episodes' `started_at` and `ended_at` are their records' own: when they were played.
    """
    now = now_utc()
    beat = session.connection().execute(_HEARTBEAT, {"b_run": run_id, "b_now": now})
    if beat.rowcount == 0:
        raise ValueError(f"no run with id {run_id} in this store; create_run first")
    change = RunChange()
    step_keys = [s.key for s in batch.steps]  # built once: a key is a new tuple each time
    counts = step_counts(step_keys, batch.steps)
    change.steps(by_action(counts.values()))
    # An episode that starts in this batch is inserted with its counters over the batch's
    # steps, and one that finishes in it too (most of them, when a sink groups a run's
    # iterations) with its outcome: the counter and finish UPDATEs rewrote most of the
    # episode indexes twice, and cost more than the insert. One the store must classify
    # from its steps is finished as the others are, once its steps are in.
    started = {s.key for s in batch.started}
    finished = [(e.key, e) for e in batch.finished]
    whole = {k: e for k, e in finished if k in started and e.failure_class}
    created = _insert_started(session, run_id, batch, change, whole, counts)
    ids = {**known, **created}
    wanted = {*step_keys, *(k for k, _ in finished)}
    ids.update(lookup_episodes(session, run_id, wanted - ids.keys()))
    if missing := sorted(wanted - ids.keys()):
        raise ValueError(
            f"run {run_id} has no started episode {missing[0]}; send its EpisodeStart first"
        )
    if batch.steps:
        episode_ids = [ids[k] for k in step_keys]
        encoded = prompts.encode(session, batch.steps, episode_ids)
        values = [
            _step_values(i, s, p) for i, s, p in zip(episode_ids, batch.steps, encoded, strict=True)
        ]
        executemany_values(session, _INSERT_STEP, STEP_COLUMNS, values, floats_exact=True)
        counted = [
            dict(zip(COUNT_PARAMETERS, (ids[k], *row.values()), strict=True))
            for k, row in counts.items()
            if k not in started
        ]
        executemany(session, COUNT_STEPS, counted)
    for k, e in whole.items():
        change.finished(e.outcome, e.failure_class, e.reward, counts.get(k, ZERO_COUNTS)["steps"])
    if rest := [(ids[k], e) for k, e in finished if k not in whole]:
        # A producer that did not classify its episodes: classified from the stored steps.
        unclassified = [
            Finished(i, e.outcome, e.progress) for i, e in rest if e.failure_class is None
        ]
        classes = classify_stored(session, unclassified) if unclassified else {}
        finishes = [finish_row(i, e, classes) for i, e in rest]
        change.finishing(
            session.connection(),
            [(r["b_id"], r["b_outcome"], r["b_failure_class"], r["b_reward"]) for r in finishes],
        )
        executemany(session, FINISH_EPISODE, finishes)
    if extras := [(ids[k], e) for k, e in finished if e.source is not None or e.rewards]:
        write_extras(session.connection(), extras)
    change.apply(session.connection(), run_id)
    index_episodes(session.connection(), [ids[k] for k, _ in finished])
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
    new = [
        (
            run_id,
            s.question_id,
            s.sample_index,
            s.seed,
            *asked_as_stored(s.db_id, s.question, s.gold_sql),
            s.started_at,
            s.forked_from,
            s.fork_step,
            s.train_step,
            s.group_index,
            *_counters(s, counts),
            *(NOT_FINISHED if (e := whole.get(s.key)) is None else outcome_values(e)),
        )
        for s in batch.started
    ]
    try:
        inserted = insert_returning(
            session,
            _EPISODES,
            EPISODE_COLUMNS,
            new,
            ("id", "question_id", "sample_index"),
        )
    except IntegrityError:
        raise ValueError(
            f"run {run_id} already has a finished episode among {keys[:3]!r}...; "
            "skip the keys Store.finished_keys returns when resuming"
        ) from None
    return {EpisodeKey(q, s): i for i, q, s in inserted}


def _counters(s: EpisodeStart, counts: Mapping[EpisodeKey, dict[str, Any]]) -> Iterable[Any]:
    """A new episode's counter columns; `has_sql_error` NULL where no SQL of it ran here."""
    row = counts.get(s.key, ZERO_COUNTS)
    return row.values() if s.sql_run_here else {**row, "has_sql_error": None}.values()


_DELETE_CHUNK = 1024
"""Keys per DELETE at most: two parameters each, well under either database's limit."""
_DROPPED = ", ".join(c.name for c in COUNTED_COLUMNS)
"""Built once: each column's name is an ORM attribute lookup, and at a transaction an
iteration the lookups cost more than the DELETE."""


def _delete_unfinished(
    conn: Connection, run_id: int, keys: Sequence[tuple[str, int]]
) -> list[tuple[Any, ...]]:
    """Delete the run's unfinished episodes of these keys; their `COUNTED_COLUMNS`."""
    # Driver SQL on the driver's cursor: SQLAlchemy expanding the (question, sample) IN list,
    # and then its result bookkeeping, each cost ten times the DELETE itself, which finds
    # nothing but on a resume.
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    pair = f"({mark}, {mark})"

    def delete(size: int) -> str:
        # IN (VALUES ...): PostgreSQL parses a plain list of row values as nested ORs, and
        # thousands of them exceed its stack depth.
        return (
            f"DELETE FROM episodes WHERE run_id = {mark} AND outcome IS NULL AND "
            f"(question_id, sample_index) IN (VALUES {', '.join([pair] * size)}) "
            f"RETURNING {_DROPPED}"
        )

    # A few sizes, each statement text prepared once (`bulk_sql.chunks`).
    return fetch_driver(
        conn,
        (
            (delete(size), (run_id, *(v for k in keys[start : start + size] for v in k)))
            for start, size in chunks(len(keys), _DELETE_CHUNK)
        ),
    )


def lookup_episodes(
    session: Session, run_id: int, keys: Iterable[EpisodeKey]
) -> dict[EpisodeKey, int]:
    """The ids of these episodes of a run (those it has)."""
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


STEP_COLUMNS = (
    "episode_id",
    "step_no",
    "prompt_shared_id",
    "prompt_from_step",
    "prompt_added",
    "raw_output",
    "action",
    "argument",
    "parsed",
    "observation",
    "error",
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


def _step_values(episode_id: int, s: StepRecord, prompt: StoredPrompt) -> tuple[Any, ...]:
    """A step's row, in `STEP_COLUMNS`' order; its floats made floats (numpy scalars reach the
    store), as `executemany_values` then takes them as they are. Flags are ints: sqlite3 binds
    those straight, where a bool costs it an adapter lookup (`bulk_sql._nulls_inlined`)."""
    mean_logprob, mean_entropy = (None, None) if s.tokens is None else trace_means(s.tokens)
    return (
        episode_id,
        s.step_no,
        *prompt,
        clean_text(s.raw_output),
        s.action,
        clean_text(s.argument),
        int(s.parsed),
        clean_text(s.observation),
        clean_text(s.error),
        float(s.reward),
        int(s.done),
        s.tokens_in,
        s.tokens_out,
        s.policy_seconds,
        s.env_seconds,
        None if s.truncated is None else int(s.truncated),
        s.cached_tokens,
        None if s.tokens is None else encode_trace(s.tokens, s.raw_output),
        mean_logprob,
        mean_entropy,
        int(s.replayed),
    )
