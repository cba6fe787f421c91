"""The read side's SQL: run metrics and summaries, the episode list query, row -> record."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    ColumnElement,
    ScalarSelect,
    and_,
    func,
    or_,
    select,
    tuple_,
    union_all,
)

from rollout_core.records import (
    ActionKind,
    FailureClass,
    Outcome,
    RunKind,
    RunStatus,
    TokenTrace,
)
from storage.cursors import FILTERS, decode_cursor, encode_cursor
from storage.lifecycle import RunPresence, effective_status
from storage.models import Annotation, Episode, Run, Step
from storage.prompts import Prompt
from storage.read_models import EpisodeFilter, EpisodeSort, EpisodeSummary, RunSummary, StoredStep
from storage.sql_limits import literal_limit
from storage.text_clean import clean_text
from storage.token_codec import TokenTraceError, decode_trace

if TYPE_CHECKING:
    from sqlalchemy import Row, Select
    from sqlalchemy.orm import Session

    from storage.text_search import SearchIds

    AnyRow = Row[*tuple[Any, ...]]
    AnySelect = Select[*tuple[Any, ...]]

SORT_COLUMNS: dict[str, Any] = {
    "id": Episode.id,
    "reward": Episode.reward,
    "steps": Episode.steps,
    "duration": Episode.duration_seconds,
    "question_id": Episode.question_id,
}
# Set only when an episode finishes: unfinished rows hold NULL there.
_NULLABLE_SORTS = {"reward", "duration"}
# NULL in finished episodes too: an imported or recorded rollout was timed by nobody.
_NULL_WHEN_FINISHED = {"duration"}


def run_summaries(runs: Sequence[Run], now: datetime) -> list[RunSummary]:
    """Summaries of runs, their metrics from the totals on their rows (`storage.run_totals`)."""
    return [_summary(r, now) for r in runs]


def _summary(run: Run, now: datetime) -> RunSummary:
    finished, steps = run.finished_episodes, run.step_sum
    presence = RunPresence(cast(RunStatus, run.status), run.host, run.pid, run.heartbeat_at)
    return RunSummary(
        id=run.id,
        name=run.name,
        status=effective_status(presence, now),
        policy=run.policy,
        checkpoint=run.checkpoint,
        checkpoint_fingerprint=run.checkpoint_fingerprint,
        dataset=run.dataset,
        created_at=run.created_at,
        started_at=run.started_at,
        ended_at=run.ended_at,
        heartbeat_at=run.heartbeat_at,
        episodes_planned=run.episodes_planned,
        episodes_finished=finished,
        correct=run.correct_episodes,
        accuracy=run.correct_episodes / finished if finished else None,
        mean_reward=run.reward_sum / finished if finished else None,
        mean_steps=run.finished_step_sum / finished if finished else None,
        parse_failure_rate=run.unparsed_sum / steps if steps else None,
        error=run.error,
        spec=dict(run.spec),
        host=run.host,
        pid=run.pid,
        kind=cast(RunKind, run.kind),
        policy_info=dict(run.policy_info) if run.policy_info else None,
        errors=run.error_episodes,
        source_format=run.source_format,
        source_path=run.source_path,
        skipped_lines=run.skipped_lines,
    )


TEXT_SEARCH_NEWEST = 40_000
"""How many of the newest episodes the dashboard's text search reads unless asked for all,
when the index cannot narrow the text (`storage.text_search`): without it, a word no episode
holds reads every output."""

TEXT_COUNT_CAP = 5_000
"""Where a list counts a text search's matches up to ("5,000+"): counting them all reads every
output of a large store (3.4 s at 10M steps). The dashboard's download cap: an export of no more
matches is still offered."""


def like_pattern(text: str) -> str:
    """`%text%` with LIKE's wildcards in the text escaped (escape char: backslash), and NUL
    as stored texts hold it (`clean_text`): SQLite's LIKE ends a pattern there, PostgreSQL
    refuses it."""
    escaped = clean_text(text).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def episode_conditions(
    flt: EpisodeFilter, text_ids: SearchIds | None = None
) -> list[ColumnElement[bool]]:
    """WHERE terms of an episode filter; they combine with AND. `text_ids`: the episodes that
    may hold the filter's text (`text_search.candidates`), the only ones its LIKE then reads."""
    c: list[ColumnElement[bool]] = []
    if flt.run_ids:
        c.append(Episode.run_id.in_(flt.run_ids))
    if flt.finished_only:
        c.append(Episode.outcome.is_not(None))
    if flt.outcomes:
        c.append(Episode.outcome.in_(flt.outcomes))
    if flt.failure_classes:
        c.append(Episode.failure_class.in_(flt.failure_classes))
    if flt.db_ids:
        c.append(Episode.db_id.in_(flt.db_ids))
    if flt.question_id is not None:
        c.append(Episode.question_id == flt.question_id)
    if flt.min_reward is not None:
        c.append(Episode.reward >= flt.min_reward)
    if flt.max_reward is not None:
        c.append(Episode.reward <= flt.max_reward)
    if flt.min_steps is not None:
        c.append(Episode.steps >= flt.min_steps)
    if flt.max_steps is not None:
        c.append(Episode.steps <= flt.max_steps)
    if flt.min_train_step is not None:
        c.append(Episode.train_step >= flt.min_train_step)
    if flt.max_train_step is not None:
        c.append(Episode.train_step <= flt.max_train_step)
    if flt.has_sql_error is not None:
        c.append(Episode.has_sql_error.is_(flt.has_sql_error))
    if flt.has_unparsed is not None:
        c.append(Episode.has_unparsed.is_(flt.has_unparsed))
    if flt.tags:
        c.append(Episode.id.in_(tagged_episodes(flt.tags, flt.run_ids)))
    if flt.min_id is not None:
        c.append(Episode.id >= flt.min_id)
    if flt.text and flt.text_newest is not None:
        c.append(Episode.id >= func.coalesce(text_window_start(flt), 0))
    if flt.text and text_ids is not None:
        c.append(Episode.id.in_(text_ids))
    if flt.text:
        pattern = like_pattern(flt.text)
        # The EXISTS probes only the steps of episodes the outer (LIMITed) scan reaches.
        in_outputs = (
            select(Step.id)
            .where(Step.episode_id == Episode.id, Step.raw_output.ilike(pattern, escape="\\"))
            .exists()
        )
        c.append(
            or_(
                Episode.question.ilike(pattern, escape="\\"),
                Episode.gold_sql.ilike(pattern, escape="\\"),
                in_outputs,
            )
        )
    return c


def text_window_start(flt: EpisodeFilter) -> ScalarSelect[int]:
    """The id of the `text_newest`-th newest episode the filter's other conditions select
    (NULL when there are fewer): a text search reads from there on."""
    depth = _text_newest(flt)
    return newest_ids(flt, depth).offset(depth - 1).limit(1).scalar_subquery()


def newest_ids(flt: EpisodeFilter, depth: int) -> AnySelect:
    """Ids of the `depth` newest episodes the filter selects, its text search aside, newest
    first."""
    others = dataclasses.replace(flt, text=None, text_newest=None)
    if len(others.run_ids) <= 1:
        return _newest_ids(others, depth)
    # Each run's newest from its (run_id, id) index, then the newest of those: one sort of all
    # the runs' episodes instead took 0.3 s at a million.
    per_run = [
        _newest_ids(dataclasses.replace(others, run_ids=(run_id,)), depth).subquery()
        for run_id in others.run_ids
    ]
    ids = union_all(*(select(sub.c.id) for sub in per_run)).subquery()
    return select(ids.c.id).order_by(ids.c.id.desc()).limit(depth)


def _text_newest(flt: EpisodeFilter) -> int:
    if flt.text_newest is None or flt.text_newest < 1:
        raise ValueError(f"text_newest must be at least 1, not {flt.text_newest}")
    return flt.text_newest


def _newest_ids(flt: EpisodeFilter, depth: int) -> AnySelect:
    return (
        select(Episode.id).where(*episode_conditions(flt)).order_by(Episode.id.desc()).limit(depth)
    )


def bounded_text_search(session: Session, flt: EpisodeFilter) -> tuple[EpisodeFilter, bool]:
    """The filter with its `text_newest` window turned into a `min_id` (looked up once), and
    whether the window left older episodes out."""
    depth = _text_newest(flt)
    start = session.scalars(newest_ids(flt, depth + 1).offset(depth - 1).limit(2)).all()
    unbounded = dataclasses.replace(flt, text_newest=None)
    if not start:  # fewer episodes than the window holds: nothing to bound
        return unbounded, False
    min_id = start[0] if flt.min_id is None else max(flt.min_id, start[0])
    return dataclasses.replace(unbounded, min_id=min_id), len(start) == 2


def unbounded_text_search(flt: EpisodeFilter) -> EpisodeFilter:
    """The filter without its `text_newest` window, for a text the index narrows: the search
    reads every episode the index names (a bound below one is refused all the same)."""
    if flt.text_newest is not None:
        _text_newest(flt)
    return dataclasses.replace(flt, text_newest=None)


def tagged_episodes(tags: Sequence[str], run_ids: Sequence[int] = ()) -> AnySelect:
    """Ids of the episodes carrying any of `tags` (on themselves or a step), from the
    (tag, run_id, episode_id) index alone."""
    stmt = select(Annotation.episode_id).where(
        Annotation.tag.in_(tags), Annotation.episode_id.is_not(None)
    )
    return stmt.where(Annotation.run_id.in_(run_ids)) if run_ids else stmt


def episode_page_query(
    flt: EpisodeFilter,
    sort: EpisodeSort,
    descending: bool,
    limit: int,
    cursor: tuple[str | None, str],
    text_ids: SearchIds | None = None,
) -> AnySelect:
    """The keyset-paged episode list: ORDER BY (sort column, id), LIMIT limit + 1; `cursor`:
    the page's cursor (None for the first) and the `filters_digest` of the list it pages."""
    if sort not in SORT_COLUMNS:
        raise ValueError(f"unknown episode sort {sort!r}; use one of {', '.join(SORT_COLUMNS)}")
    col = SORT_COLUMNS[sort]
    nullable = sort in _NULL_WHEN_FINISHED or (sort in _NULLABLE_SORTS and not flt.finished_only)
    # An outer join (every episode has its run) keeps episodes the outer loop in SQLite: with an
    # inner join it led with runs and sorted every match before the LIMIT (1.7 s at 1M episodes).
    stmt = (
        select(*_SUMMARY_COLUMNS)
        .select_from(Episode)
        .outerjoin(Run, Run.id == Episode.run_id)
        .where(*episode_conditions(flt, text_ids))
    )
    token, filters = cursor
    if token is not None:
        key = decode_cursor(token, expect={"sort": sort, "desc": descending, FILTERS: filters})
        stmt = stmt.where(_after(col, key.get("v"), key["id"], descending, nullable, sort == "id"))
    if sort == "id":
        order = [Episode.id.desc() if descending else Episode.id.asc()]
    elif descending:
        order = [col.desc().nulls_first() if nullable else col.desc(), Episode.id.desc()]
    else:
        order = [col.asc().nulls_last() if nullable else col.asc(), Episode.id.asc()]
    return stmt.order_by(*order).limit(literal_limit(limit + 1))


def _after(
    col: Any, value: Any, last_id: int, descending: bool, nullable: bool, by_id: bool
) -> ColumnElement[bool]:
    """Rows strictly after (value, last_id) in the page order; NULLs sort after all values."""
    if by_id:
        return Episode.id < last_id if descending else Episode.id > last_id
    if descending:
        if value is None:  # NULLs come first when descending: the rest of them, then values
            return or_(and_(col.is_(None), Episode.id < last_id), col.is_not(None))
        return tuple_(col, Episode.id) < tuple_(value, last_id)
    if value is None:
        return and_(col.is_(None), Episode.id > last_id)
    after = tuple_(col, Episode.id) > tuple_(value, last_id)
    return or_(after, col.is_(None)) if nullable else after


def next_cursor(row: AnyRow, filters: str, sort: EpisodeSort, descending: bool) -> str:
    """The cursor that continues after this row, in the list of these filters (their
    `filters_digest`)."""
    value = None if sort == "id" else row._mapping[_SORT_LABELS[sort]]
    return encode_cursor(sort=sort, desc=descending, v=value, id=row.id, **{FILTERS: filters})


_SORT_LABELS = {"reward": "reward", "steps": "steps", "duration": "duration_seconds",
                "question_id": "question_id"}  # fmt: skip

_SUMMARY_COLUMNS = (
    Episode.id,
    Episode.run_id,
    Run.name.label("run_name"),
    Episode.question_id,
    Episode.sample_index,
    Episode.db_id,
    Episode.question,
    Episode.outcome,
    Episode.reward,
    Episode.steps,
    Episode.duration_seconds,
    Episode.has_sql_error,
    Episode.has_unparsed,
    Episode.answer,
    Episode.forked_from,
    Episode.fork_step,
    Episode.failure_class,
    Episode.train_step,
)


def summary_columns() -> tuple[Any, ...]:
    """Columns `episode_summary` reads, joined from episodes and runs."""
    return _SUMMARY_COLUMNS


def episode_summary(row: AnyRow) -> EpisodeSummary:
    """An EpisodeSummary from a row of `summary_columns()`."""
    return EpisodeSummary(
        id=row.id,
        run_id=row.run_id,
        run_name=row.run_name,
        question_id=row.question_id,
        sample_index=row.sample_index,
        db_id=row.db_id,
        question=row.question,
        outcome=cast(Outcome | None, row.outcome),
        reward=row.reward,
        steps=row.steps,
        duration_seconds=row.duration_seconds,
        has_sql_error=None if row.has_sql_error is None else bool(row.has_sql_error),
        has_unparsed=bool(row.has_unparsed),
        answer=row.answer,
        forked_from=row.forked_from,
        fork_step=row.fork_step,
        failure_class=cast(FailureClass | None, row.failure_class),
        train_step=row.train_step,
    )


def stored_step(s: Step, question_id: str, sample_index: int, prompt: Prompt) -> StoredStep:
    """A StoredStep from its ORM row, its episode's key and its prompt (`storage.prompts`)."""
    return StoredStep(
        question_id,
        sample_index,
        step_no=s.step_no,
        prompt=prompt,
        raw_output=s.raw_output,
        action=cast(ActionKind | None, s.action),
        argument=s.argument,
        parsed=s.parsed,
        observation=s.observation,
        error=s.error,
        reward=s.reward,
        done=s.done,
        tokens_in=s.tokens_in,
        tokens_out=s.tokens_out,
        policy_seconds=s.policy_seconds,
        env_seconds=s.env_seconds,
        tokens=_trace(s),
        truncated=s.truncated,
        cached_tokens=s.cached_tokens,
        replayed=s.replayed,
        id=s.id,
        mean_logprob=s.mean_logprob,
        mean_entropy=s.mean_entropy,
    )


def _trace(s: Step) -> TokenTrace | None:
    if s.token_trace is None:
        return None
    try:
        return decode_trace(s.token_trace, s.raw_output)
    except TokenTraceError:  # a damaged blob must not hide the step
        return None
