"""The Store: the runner's sink on the write side, records for the CLI and dashboard on the
read side.

CONTRACT (helpers build against this; keep the signatures):
- `Store(url)` opens (and creates / migrates) a store at a SQLAlchemy URL; a bare path means
  SQLite. One engine per URL per process.
- `Store(url, read_only=True)` opens an existing store to read: no migration, no ANALYZE, no
  lock a writer waits for, nothing written; a store it cannot read as it is (missing, empty,
  older or newer schema) is refused in one line that names the fix.
- Writes are short transactions; each Store method owns its session.
- Reads return the records of `storage.read_models`, never ORM objects.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar, cast

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session

from rollout_core import grpo
from rollout_core.keys import run_name_problem
from rollout_core.records import (
    RUN_STATUSES,
    EpisodeKey,
    PolicyInfo,
    RunKind,
    RunSpec,
    RunStatus,
)
from rollout_core.utf8 import holds_lone_surrogate
from storage import (
    aggregates,
    groups,
    imports,
    lifecycle,
    reads,
    replayed,
    tagging,
    text_search,
    trainer_scores,
)
from storage.cursors import filters_digest
from storage.engine import (
    PERMISSION_DENIED,
    SERVER_HINT,
    SQLITE_IMMEDIATE,
    URL_HINT,
    StoreError,
    dispose_engine,
    get_engine,
    normalize_url,
    unwritable_store,
)
from storage.engine import store_error as _store_error
from storage.migrations import (
    NotAStore,
    SchemaUpgrade,
    check_readable,
    check_sqlite_file,
    upgrade_to_head,
)
from storage.models import BIG_INTEGER_RANGE, Episode, Run, Step
from storage.prompts import rebuild_prompts
from storage.read_models import (
    TRAINING_KINDS,
    Annotation,
    Distribution,
    EpisodeDetail,
    EpisodeFilter,
    EpisodeSort,
    EpisodeSummary,
    GroupDetail,
    GroupKey,
    GroupMember,
    GroupOverview,
    IdApart,
    OutcomeMatrix,
    Page,
    QuestionComparison,
    QuestionOutcomes,
    RunKey,
    RunSummary,
    TagCount,
)
from storage.run_totals import COUNTED_COLUMNS, RunChange
from storage.sink import StoreSink
from storage.text_clean import clean_json
from storage.writes import lookup_episodes, now_utc, retry_locked

__all__ = ["DuplicateRunName", "Store", "StoreError"]

T = TypeVar("T")


class DuplicateRunName(StoreError):
    """A run of that name exists in the store already."""


class Store:
    """A rollscope store at one SQLAlchemy URL."""

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        self.url = url
        self.read_only = read_only
        """True for a reader: every write method raises StoreError."""
        self.schema_upgrade: SchemaUpgrade | None = None
        """What opening did to the schema (writers; None for a reader, which never migrates)."""
        self._url = normalize_url(url)
        shown = self._url.render_as_string(hide_password=True) if "://" in url else url
        try:
            if read_only:
                with self._engine.connect() as conn, conn.begin():
                    sqlite_file = self._url.database if self.dialect == "sqlite" else None
                    check_readable(conn, shown, sqlite_file)
            else:
                if self.dialect == "sqlite" and self._url.database:
                    if (refused := unwritable_store(shown, self._url.database)) is not None:
                        raise refused
                    check_sqlite_file(self._url.database)
                self.schema_upgrade = upgrade_to_head(self._engine)
        except DBAPIError as exc:
            dispose_engine(self._url, read_only=read_only)
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            hint = URL_HINT if self.dialect == "sqlite" else SERVER_HINT
            if getattr(exc.orig, "sqlstate", None) == PERMISSION_DENIED:
                hint = "this database user may not read the store's tables: grant it SELECT"
            elif "database is locked" in reason:  # held past the busy timeout
                hint = "another process holds the store for writing; try again when it is done"
            raise _store_error(shown, reason, hint) from None
        except NotAStore as exc:
            dispose_engine(self._url, read_only=read_only)
            raise _store_error(shown, str(exc)) from None
        except StoreError:
            dispose_engine(self._url, read_only=read_only)
            raise
        if self.dialect == "sqlite" and not read_only:
            # Best effort: fresh planner statistics make the paged reads pick the right
            # indexes; a read-only or busy file still opens without them.
            with suppress(OperationalError):
                self.optimize()

    @property
    def _engine(self) -> Engine:
        # Looked up per call: a forked worker gets its own engine, never the parent's sockets.
        return get_engine(self._url, read_only=self.read_only)

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError(
                f"store {self.url!r} was opened read-only; open it with Store(url) to write"
            )

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite store's file; None for a server's store or one held in memory."""
        database = self._url.database
        if self.dialect != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql` (or another SQLAlchemy backend name)."""
        return self._url.get_backend_name()

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """A session in a transaction that holds the write lock from its start (SQLite)."""
        self._check_writable()
        with Session(self._engine) as session, session.begin():
            session.connection(execution_options={SQLITE_IMMEDIATE: True})
            yield session

    def optimize(self) -> None:
        """Refresh the planner's statistics (SQLite has none until asked; cheap, bounded), and
        on SQLite give the text search index its settings."""
        self._check_writable()  # ANALYZE writes sqlite_stat1 and takes the write lock

        def run() -> None:
            with self._engine.connect() as conn:
                conn = conn.execution_options(**{SQLITE_IMMEDIATE: True})
                with conn.begin():
                    if conn.dialect.name == "sqlite":
                        # Sample at most ~1000 rows per index: milliseconds even at millions
                        # of steps. Without stats SQLite picks (run_id, outcome) over the
                        # better (run_id, question_id, ...) index and scans whole runs.
                        conn.exec_driver_sql("PRAGMA analysis_limit=1000")
                        text_search.keep_settings(conn)
                    conn.exec_driver_sql("ANALYZE")

        retry_locked(run)

    def file_space(self) -> tuple[int, int] | None:
        """The SQLite file's bytes and, of them, those its free pages hold (a rebuilt table's
        or a deleted run's, reused by later writes; `VACUUM` gives them back to the disk);
        None on PostgreSQL."""
        if self.dialect != "sqlite":
            return None
        with self._engine.connect() as conn:
            pages, free, size = (
                int(conn.exec_driver_sql(f"PRAGMA {name}").scalar_one())
                for name in ("page_count", "freelist_count", "page_size")
            )
        return pages * size, free * size

    # -- runs ---------------------------------------------------------------------------------

    def create_run(
        self,
        spec: RunSpec,
        *,
        episodes_planned: int | None,
        status: RunStatus = "running",
        policy_info: PolicyInfo | None = None,
        source_format: str | None = None,
        source_path: str | None = None,
    ) -> int:
        """Insert a run (its name must be unique: DuplicateRunName otherwise); returns its id.
        `source_format`, `source_path`: where the episodes of a run rollscope does not play come
        from (an import's format and files, a Recorder)."""
        _check_status(status)
        if problem := run_name_problem(spec.name):
            raise StoreError(f"the run name {problem}; choose another name")
        now = now_utc()
        running = status == "running"
        host, pid = lifecycle.this_process()

        def insert() -> int:
            run = Run(
                name=spec.name,
                kind=spec.kind,
                policy=clean_json(spec.policy),
                checkpoint=clean_json(spec.checkpoint),
                checkpoint_fingerprint=policy_info.fingerprint if policy_info else None,
                dataset=clean_json(spec.dataset) or None,
                spec=clean_json(spec.to_stored(played_here=source_format is None)),
                policy_info=_info_json(policy_info),
                episodes_planned=episodes_planned,
                status=status,
                host=host,
                pid=pid,
                created_at=now,
                started_at=now if running else None,
                heartbeat_at=now if running else None,
                source_format=source_format,
                source_path=None if source_path is None else clean_json(source_path),
            )
            with self._writing() as session:
                session.add(run)
                session.flush()
                return run.id

        try:
            return retry_locked(insert)
        except IntegrityError:
            raise DuplicateRunName(
                f"a run named {spec.name!r} already exists in this store; choose another name"
            ) from None

    def set_run_status(self, run_id: int, status: RunStatus, *, error: str | None = None) -> None:
        """Move a run to a status (RunStateError when the move is not allowed, e.g. resuming a
        completed run); terminal statuses set `ended_at`, `running` records this process."""
        _check_status(status)

        def move() -> None:
            with self._writing() as session:
                run = session.get(Run, run_id)
                if run is None:
                    raise StoreError(f"no run with id {run_id} in this store")
                presence = _presence(run)
                current = lifecycle.effective_status(presence, now_utc())
                lifecycle.check_move(run.name, current, status, cast(RunKind, run.kind), presence)
                now = now_utc()
                run.status, run.error, run.heartbeat_at = status, error, now
                if status in lifecycle.TERMINAL:
                    run.ended_at = now
                elif status == "running":
                    run.started_at = run.started_at or now
                    run.ended_at = None
                    # A queued or resumed run is played by this process now.
                    run.host, run.pid = lifecycle.this_process()

        retry_locked(move)

    def set_policy_info(self, run_id: int, info: PolicyInfo) -> None:
        """Record what the run's policy reported about itself once built."""
        self._update_run(
            run_id, {"policy_info": _info_json(info), "checkpoint_fingerprint": info.fingerprint}
        )

    def set_run_checkpoint(self, run_id: int, checkpoint: str) -> None:
        """Name the model a run's episodes come from, where its producer learned it late (an
        import that began before the files naming it came)."""
        self._update_run(run_id, {"checkpoint": clean_json(checkpoint)})

    def heartbeat(self, run_id: int) -> None:
        """Record that the run's process is alive (also done by every sink write)."""
        self._update_run(run_id, {"heartbeat_at": now_utc()})

    def _update_run(self, run_id: int, values: dict[str, object]) -> None:
        def run() -> int:
            with self._writing() as session:
                result = session.execute(update(Run).where(Run.id == run_id).values(**values))
                return int(result.rowcount)  # type: ignore[attr-defined]

        if retry_locked(run) == 0:
            raise StoreError(f"no run with id {run_id} in this store")

    def tag_run(self, run_id: int, name: str, value: str) -> None:
        """Set a name/value label on a run (replacing that name's earlier value)."""

        def run() -> None:
            with self._writing() as session:
                tagging.set_run_label(session, run_id, name, value)

        try:
            retry_locked(run)
        except IntegrityError:
            raise StoreError(f"no run with id {run_id} in this store") from None

    def run_tags(self, run_id: int) -> dict[str, str]:
        """A run's labels, by name."""
        with Session(self._engine) as session:
            return tagging.run_labels(session, run_id)

    def annotate(
        self,
        episode_id: int,
        tag: str,
        *,
        note: str | None = None,
        step: int | None = None,
        author: str | None = None,
    ) -> Annotation:
        """Tag an episode (or one of its steps) with a note; the same tag on the same target
        replaces the earlier note. AnnotationError for a bad tag, episode or step."""
        return retry_locked(
            lambda: self._in_write(tagging.annotate_episode, episode_id, tag, note, step, author)
        )

    def remove_annotation(self, episode_id: int, tag: str, *, step: int | None = None) -> bool:
        """Remove an episode's (or step's) tag; False when it had none such."""
        return retry_locked(
            lambda: self._in_write(tagging.remove_episode_annotation, episode_id, tag, step)
        )

    def _in_write(self, fn: Callable[..., T], *args: object) -> T:
        with self._writing() as session:
            return fn(session, *args)

    def annotations(self, episode_id: int) -> list[Annotation]:
        """An episode's tags and notes (on it and its steps), oldest first."""
        with Session(self._engine) as session:
            return tagging.episode_annotations(session, [episode_id])[episode_id]

    def annotations_of(self, episode_ids: Sequence[int]) -> dict[int, list[Annotation]]:
        """The tags and notes of several episodes (a page of a list), by episode, oldest first."""
        with Session(self._engine) as session:
            return tagging.episode_annotations(session, list(dict.fromkeys(episode_ids)))

    def annotation_tags(self, run_ids: Sequence[int] = ()) -> list[TagCount]:
        """Tags on the runs' episodes (all runs when none given), most used first."""
        with Session(self._engine) as session:
            return tagging.tag_counts(session, run_ids)

    def sink(
        self, run_id: int, *, skip_finished: bool = False, group_seconds: float = 0.0
    ) -> StoreSink:
        """The run's sink (`storage.sink.StoreSink`): each IterationBatch written as one
        transaction, or with `group_seconds` the batches of that long together (use it in a
        `with` block, or call `flush`, so that the last batches are written)."""
        return StoreSink(self, run_id, skip_finished=skip_finished, group_seconds=group_seconds)

    # -- imports ------------------------------------------------------------------------------

    def begin_import_files(
        self, run_id: int, files: Sequence[imports.FileBytes]
    ) -> list[imports.FileStart]:
        """The run's record of each imported file with its bytes, made where it has none, in
        one transaction (`storage.imports.begin_files`)."""
        return retry_locked(
            lambda: self._in_write(imports.begin_files, run_id, list(files), now_utc())
        )

    def imported_digests(self, run_id: int, path: str, after: int | None = None) -> Counter[bytes]:
        """row SHA-256 -> how many such rows the run holds from files recorded under `path`
        (with `after`, recorded after that file)."""
        with Session(self._engine) as session:
            return imports.stored_digests(session, run_id, path, after)

    def last_file_reading(self, run_id: int, path: str) -> imports.LastReading | None:
        """The file at `path` as the run's last whole reading of it found it."""
        with Session(self._engine) as session:
            return imports.last_reading(session, run_id, path)

    def finish_import_files(self, run_id: int, files: Sequence[imports.FileRead]) -> list[int]:
        """Imported files read whole, with the bad lines each holds, in one transaction; the
        episodes each gave (`storage.imports.finish_files`)."""
        return retry_locked(
            lambda: self._in_write(imports.finish_files, run_id, list(files), now_utc())
        )

    def step_groups(self, run_id: int, train_step: int) -> dict[str, int]:
        """question id -> GRPO group of the run's episodes at a training step."""
        with Session(self._engine) as session:
            return imports.step_groups(session, run_id, train_step)

    def own_runs_mark(self) -> tuple[int, ...]:
        """Changes when rollscope's own runs play more (`imports.own_runs_mark`)."""
        with Session(self._engine) as session:
            return imports.own_runs_mark(session)

    def own_questions(self) -> list[tuple[str, str]]:
        """(text, id) of the questions rollscope's own runs played (`imports.own_questions`)."""
        with Session(self._engine) as session:
            return imports.own_questions(session)

    def run_question_ids(self, run_id: int) -> list[str]:
        """The ids of the questions a run's episodes ask."""
        with Session(self._engine) as session:
            return imports.question_ids(session, run_id)

    def rekey_questions(self, run_id: int, renamed: Mapping[str, str]) -> int:
        """Give the episodes of a run rollscope did not play (an import's, a Recorder's) of
        each old question id the new one, in one transaction (`storage.imports.rekey_questions`);
        the episodes moved."""
        if not renamed:
            return 0
        return retry_locked(lambda: self._in_write(imports.rekey_questions, run_id, renamed))

    def record_trainer_scores(
        self, run_id: int, scores: Sequence[trainer_scores.TrainerScore]
    ) -> int:
        """Record how the trainer scored some of the run's episodes: their advantages and
        named rewards (`storage.trainer_scores`); the episodes scored."""
        if not scores:
            return 0
        return retry_locked(lambda: self._in_write(trainer_scores.write, run_id, scores))

    def run_agents(self, run_ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
        """The agents whose traces each run holds, for the runs whose files name any
        (`storage.imports.agents_of`)."""
        with Session(self._engine) as session:
            return imports.agents_of(session, list(run_ids))

    def episode_origins(self, episode_ids: Sequence[int]) -> dict[int, imports.EpisodeOrigin]:
        """Where these episodes were imported from and their rewards by name (those with any)."""
        with Session(self._engine) as session:
            return imports.origins(session, list(dict.fromkeys(episode_ids)))

    def replaced_among(self, episode_ids: Sequence[int]) -> frozenset[int]:
        """Those of these episodes that a later play of their training step replaced."""
        with Session(self._engine) as session:
            return replayed.replaced_among(session, list(dict.fromkeys(episode_ids)))

    def episode_ids(self, run_id: int, keys: Sequence[EpisodeKey]) -> dict[EpisodeKey, int]:
        """The ids of these episodes of a run (those it has)."""
        with Session(self._engine) as session:
            return lookup_episodes(session, run_id, keys)

    def finished_keys(self, run_id: int) -> set[EpisodeKey]:
        """The run's finished episodes, for resume."""
        with Session(self._engine) as session:
            rows = session.execute(
                select(Episode.question_id, Episode.sample_index).where(
                    Episode.run_id == run_id, Episode.outcome.is_not(None)
                )
            )
            return {EpisodeKey(q, s) for q, s in rows}

    def played_questions(self, run_id: int) -> dict[str, tuple[str | None, str, str | None]]:
        """Each question id the run finished an episode of: (database, question, gold SQL) as
        its first finished episode recorded them, for a resume to check against its dataset."""
        first = (
            select(func.min(Episode.id))
            .where(Episode.run_id == run_id, Episode.outcome.is_not(None))
            .group_by(Episode.question_id)
        )
        stmt = select(Episode.question_id, Episode.db_id, Episode.question, Episode.gold_sql)
        with Session(self._engine) as session:
            rows = session.execute(stmt.where(Episode.id.in_(first)))
            return {qid: (db_id, text, gold) for qid, db_id, text, gold in rows}

    def delete_unfinished_episodes(self, run_id: int) -> int:
        """Drop the run's episodes that never finished (and their steps); returns how many."""

        def run() -> int:
            with self._writing() as session:
                gone = session.execute(
                    delete(Episode)
                    .where(Episode.run_id == run_id, Episode.outcome.is_(None))
                    .returning(*COUNTED_COLUMNS)
                ).all()
                change = RunChange()
                change.dropped(gone)
                change.apply(session.connection(), run_id)
                return len(gone)

        return retry_locked(run)

    def mark_replayed(self, run_id: int, resumed_at_step: int) -> int:
        """Mark the training run's episodes of `resumed_at_step` and later as replaced by a
        trainer resumed there, which plays those steps again (`storage.replayed`); returns
        how many were marked."""

        def run() -> int:
            with self._writing() as session:
                return replayed.mark_replayed(session, run_id, resumed_at_step)

        return retry_locked(run)

    def delete_run(self, run_id: int) -> bool:
        """Delete a run with its episodes and steps; False when there was no such run."""

        def run() -> int:
            with self._writing() as session:
                result = session.execute(delete(Run).where(Run.id == run_id))
                return int(result.rowcount)  # type: ignore[attr-defined]

        return retry_locked(run) > 0

    # -- reads --------------------------------------------------------------------------------

    def list_runs(self, *, limit: int = 200, training: bool = False) -> list[RunSummary]:
        """Runs newest first, with metrics; `training`: those that may carry training steps
        alone (`RunSummary.is_training`)."""
        stmt = select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
        if training:
            stmt = stmt.where(Run.kind.in_(TRAINING_KINDS))
        with Session(self._engine) as session:
            return reads.run_summaries(session.scalars(stmt).all(), now_utc())

    def count_runs(self) -> int:
        """How many runs the store holds."""
        with Session(self._engine) as session:
            return int(session.scalar(select(func.count()).select_from(Run)) or 0)

    def get_run(self, run_id: int) -> RunSummary | None:
        """One run with its metrics; None when there is no such run."""
        with Session(self._engine) as session:
            return self._run_by(session, Run.id == run_id)

    def run_named(self, name: str) -> RunSummary | None:
        """The run of this name, never one whose id it reads as: a producer opening its run
        by name (an import, a Recorder) must not go on with another."""
        if holds_lone_surrogate(name):
            return None
        with Session(self._engine) as session:
            return self._run_by(session, Run.name == name)

    def find_run(self, name_or_id: str) -> RunSummary | None:
        """A run by name, or by id when the text is a number: a reference a person gave."""
        if holds_lone_surrogate(name_or_id):
            return None  # no stored name holds one (and no driver takes one)
        with Session(self._engine) as session:
            found = self._run_by(session, Run.name == name_or_id)
            number = name_or_id.strip()
            # isdecimal, not isdigit: int() refuses a digit such as '²'.
            if found is None and number.isdecimal() and int(number) in BIG_INTEGER_RANGE:
                found = self._run_by(session, Run.id == int(number))
            return found

    def _run_by(self, session: Session, condition: object) -> RunSummary | None:
        run = session.scalars(select(Run).where(condition)).one_or_none()  # type: ignore[arg-type]
        if run is None:
            return None
        return reads.run_summaries([run], now_utc())[0]

    def list_db_ids(self, run_ids: Sequence[int] = ()) -> list[str]:
        """Database names played in the given runs (all runs when none given), sorted."""
        stmt = select(Episode.db_id).where(Episode.db_id.is_not(None)).distinct()
        stmt = stmt.order_by(Episode.db_id)
        if run_ids:
            stmt = stmt.where(Episode.run_id.in_(run_ids))
        with Session(self._engine) as session:
            return list(session.scalars(stmt))

    def list_episodes(
        self,
        flt: EpisodeFilter,
        *,
        sort: EpisodeSort = "id",
        descending: bool = False,
        limit: int = 50,
        cursor: str | None = None,
        with_total: bool = False,
        total_cap: int | None = None,
    ) -> Page[EpisodeSummary]:
        """Keyset-paged, filtered, sorted episode list; with `with_total`, the number of matches,
        counted up to `total_cap` when one is given (a text search over millions of steps
        stops counting there instead of reading every output). A text search reads the
        episodes the index names (`storage.text_search`); one it cannot narrow is bounded by
        the filter's `text_newest`, and the page's `text_window` says when that left some out."""
        if limit < 1:
            raise ValueError(f"page limit must be at least 1, not {limit}")
        total, capped, window = None, False, None
        asked = filters_digest(flt)  # the filters given: a text search's bounds move as it grows
        with Session(self._engine) as session:
            text_ids = text_search.candidates(session, flt.text) if flt.text else None
            if text_ids is not None:
                flt = reads.unbounded_text_search(flt)
            elif flt.text and flt.text_newest is not None:
                # The window's start looked up once, for the page and its count alike.
                newest = flt.text_newest
                flt, left_out = reads.bounded_text_search(session, flt)
                window = newest if left_out else None
            stmt = reads.episode_page_query(flt, sort, descending, limit, (cursor, asked), text_ids)
            rows = session.execute(stmt).all()
            if with_total and cursor is None and len(rows) <= limit:
                total = len(rows)  # the first page holds every match: nothing left to count
            elif with_total:
                conditions = reads.episode_conditions(flt, text_ids)
                if total_cap is None:
                    count = select(func.count()).select_from(Episode).where(*conditions)
                else:
                    some = select(Episode.id).where(*conditions).limit(total_cap + 1).subquery()
                    count = select(func.count()).select_from(some)
                total = int(session.scalar(count) or 0)
                if total_cap is not None and total > total_cap:
                    total, capped = total_cap, True
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(
            items=[reads.episode_summary(r) for r in rows],
            next_cursor=reads.next_cursor(rows[-1], asked, sort, descending) if more else None,
            total=total,
            total_capped=capped,
            text_window=window,
        )

    def get_episode(self, episode_id: int) -> EpisodeDetail | None:
        """One episode with its steps in order and its run; None when there is none."""
        with Session(self._engine) as session:
            found = self._details(session, [episode_id], None)
        return found[0] if found else None

    def get_episodes(self, episode_ids: Sequence[int], *, batch: int = 200) -> list[EpisodeDetail]:
        """Several episodes with their steps, in id order; unknown ids are left out."""
        ids = sorted(set(episode_ids))
        found: list[EpisodeDetail] = []
        for start in range(0, len(ids), batch):
            # A short read per batch: a long-open read would stall SQLite's WAL checkpoints.
            with Session(self._engine) as session:
                found += self._details(session, ids[start : start + batch], None)
        return found

    def _details(
        self, session: Session, episode_ids: list[int], run: RunSummary | None
    ) -> list[EpisodeDetail]:
        """Details of episodes (all of one run when `run` is given), steps in one query."""
        rows = session.execute(
            select(
                *reads.summary_columns(),
                Episode.gold_sql,
                Episode.seed,
                Episode.progress,
                Episode.operational,
                Episode.error,
                Episode.group_index,
                Episode.tokens_out,
                Episode.mean_logprob,
                Episode.trainer_advantage,
            )
            .join(Run, Run.id == Episode.run_id)
            .where(Episode.id.in_(episode_ids))
            .order_by(Episode.id)
        ).all()
        steps: dict[int, list[Step]] = {r.id: [] for r in rows}
        loaded = session.scalars(
            select(Step).where(Step.episode_id.in_(steps)).order_by(Step.episode_id, Step.step_no)
        ).all()
        for s in loaded:
            steps[s.episode_id].append(s)
        prompts = rebuild_prompts(session, loaded)
        runs: dict[int, RunSummary] = {run.id: run} if run is not None else {}
        notes = tagging.episode_annotations(session, [r.id for r in rows])
        out = []
        for r in rows:
            if r.run_id not in runs:
                found = self._run_by(session, Run.id == r.run_id)
                assert found is not None  # the foreign key guarantees it
                runs[r.run_id] = found
            out.append(
                EpisodeDetail(
                    summary=reads.episode_summary(r),
                    gold_sql=r.gold_sql,
                    seed=r.seed,
                    progress=r.progress,
                    operational=r.operational,
                    error=r.error,
                    steps=[
                        reads.stored_step(
                            s, r.question_id, r.sample_index, prompts[s.episode_id, s.step_no]
                        )
                        for s in steps[r.id]
                    ],
                    run=runs[r.run_id],
                    annotations=notes[r.id],
                    group_index=r.group_index,
                    tokens_out=r.tokens_out,
                    mean_logprob=r.mean_logprob,
                    trainer_advantage=r.trainer_advantage,
                )
            )
        return out

    def compare_runs(
        self,
        runs: Sequence[RunKey],
        *,
        limit: int = 100,
        cursor: str | None = None,
        with_episode_ids: bool = True,
    ) -> Page[QuestionComparison]:
        """Per-question results of several runs (a `RunStep`: one training step of a run),
        over the questions any of them played; `with_episode_ids=False` leaves each cell's
        episode ids out (a list needs counts)."""
        with Session(self._engine) as session:
            return aggregates.compare_page(
                session, runs, limit, cursor, with_episode_ids=with_episode_ids
            )

    def compare_question(
        self, runs: Sequence[RunKey], question_id: str
    ) -> QuestionComparison | None:
        """One question's results in each run (or training step), with the episode ids; None
        when none played it."""
        with Session(self._engine) as session:
            found = aggregates.comparisons(session, runs, [question_id], with_episode_ids=True)
            return found[0] if found else None

    def compare_outcomes(self, runs: Sequence[RunKey]) -> list[QuestionOutcomes]:
        """Episode and correct counts per question and run (or training step), over every
        question they finished."""
        with Session(self._engine) as session:
            return aggregates.compare_outcomes(session, runs)

    def compare_outcomes_apart(
        self, runs: Sequence[RunKey]
    ) -> tuple[list[QuestionOutcomes], list[IdApart]]:
        """`compare_outcomes`, and the question ids two of the runs share whose episodes ask
        different questions (`aggregates.compare_outcomes_apart`): Compare pairs none of them."""
        with Session(self._engine) as session:
            return aggregates.compare_outcomes_apart(session, runs)

    def outcome_matrix(self, runs: Sequence[RunKey]) -> OutcomeMatrix:
        """Finished and correct episodes per question and run (or training step of a run:
        the question x checkpoint map), over every question any of them finished."""
        with Session(self._engine) as session:
            return aggregates.outcome_matrix(session, runs)

    def run_distributions(self, runs: Sequence[RunKey]) -> list[Distribution]:
        """Action mix, reward and steps histograms per run (or training step of a run)."""
        with Session(self._engine) as session:
            return aggregates.distributions(session, runs)

    def failure_counts_on(self, key: RunKey, question_ids: Sequence[str]) -> dict[str, int]:
        """A run's (or training step's) finished episodes per failure class on these
        questions alone (`aggregates.failure_counts_on`)."""
        with Session(self._engine) as session:
            return aggregates.failure_counts_on(session, key, question_ids)

    def group_overview(
        self,
        run_id: int,
        *,
        limit: int = 500,
        question: str | None = None,
        min_train_step: int | None = None,
        max_train_step: int | None = None,
    ) -> GroupOverview:
        """A run's GRPO groups (its finished samples of one question; in a training run, of one
        question at one training step) summed up, with the `limit` of highest reward standard
        deviation listed, or every group of `question`, and their questions' texts; a training
        run's groups of a range of training steps when given one (`groups.overview`)."""
        with Session(self._engine) as session:
            found = groups.overview(
                session,
                run_id,
                limit=limit,
                question=question,
                min_train_step=min_train_step,
                max_train_step=max_train_step,
            )
            wanted = sorted({g.key.question_id for g in found.groups})
            texts = groups.question_texts(session, run_id, wanted) if wanted else {}
        return dataclasses.replace(found, questions=texts)

    def groups_by_step(self, run_id: int) -> bool:
        """Whether a run's GRPO groups are a question's samples at one training step: its
        episodes carry training steps (`groups.is_training_run`), whatever its kind."""
        with Session(self._engine) as session:
            return groups.is_training_run(session, run_id)

    def group_size(self, run_id: int, key: GroupKey) -> int:
        """How many finished episodes a GRPO group has (`groups.size`)."""
        with Session(self._engine) as session:
            return groups.size(session, run_id, key)

    def get_group(self, run_id: int, key: GroupKey) -> GroupDetail | None:
        """One GRPO group: its statistics and its finished episodes (with steps and their GRPO
        advantages), by sample index; None when the run has no finished episode of it."""
        with Session(self._engine) as session:
            key, members = groups.members(session, run_id, key)
            if not members:
                return None
            found = self._details(session, [m[0] for m in members], None)
        details = {d.summary.id: d for d in found}
        rewards = [reward for _, reward, _ in members]
        advantages = [details[i].trainer_advantage for i, _, _ in members]
        stats = groups.stats_of(run_id, key, rewards, sum(c for _, _, c in members), advantages)
        return GroupDetail(
            stats=stats,
            members=[
                GroupMember(details[i], a)
                for (i, _, _), a in zip(members, grpo.advantages(rewards), strict=True)
            ],
        )

    def iter_episode_details(
        self, run_id: int, *, flt: EpisodeFilter | None = None, batch: int = 200
    ) -> Iterator[EpisodeDetail]:
        """Every finished episode of a run (of those `flt` matches, when given; its `run_ids`
        are replaced by this run) with its steps, in id order, streamed (for export)."""
        run = self.get_run(run_id)
        if run is None:
            return
        where = reads.episode_conditions(
            dataclasses.replace(flt or EpisodeFilter(), run_ids=(run_id,))
        )
        last = 0
        while True:
            # A short read per batch: a long-open read would stall SQLite's WAL checkpoints.
            with Session(self._engine) as session:
                ids = list(
                    session.scalars(
                        select(Episode.id)
                        .where(*where, Episode.id > last)
                        .order_by(Episode.id)
                        .limit(batch)
                    )
                )
                details = self._details(session, ids, run) if ids else []
            yield from details
            if len(ids) < batch:
                return
            last = ids[-1]

    def close(self) -> None:
        """Close this process's pooled connections to the store."""
        dispose_engine(self._url, read_only=self.read_only)


def _presence(run: Run) -> lifecycle.RunPresence:
    return lifecycle.RunPresence(run.status, run.host, run.pid, run.heartbeat_at)  # type: ignore[arg-type]


def _info_json(info: PolicyInfo | None) -> dict[str, object] | None:
    return None if info is None else clean_json(dataclasses.asdict(info))


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; use one of {', '.join(RUN_STATUSES)}")
