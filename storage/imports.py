"""Imported runs in the store: the files an import read, the row each episode came from, and
every episode's rewards by name.

The sink writes an episode's source row and named rewards with its finish (`write_extras`,
from `writes.write_batch`, only for records that carry them). The rest is the import's own
bookkeeping, a short transaction for a group of files (one large file, or many small ones):
the files are recorded when their reading starts (`begin_files`) and completed once their
last rows are in (`finish_files`). A file read whole is found again by its path and SHA-256
and not read again, and a file read in part, or grown since (an appending writer), is read on
past the rows the run holds (found by their digest).
A JSONL file that still begins with the bytes its last whole reading found (`last_reading`)
is read on from where that reading ended. A version of a path found again after another is
read again on its own record, and a file with the bytes of another path's whole reading is
that file's copy (the importer tells whether that file is still there).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Select,
    Table,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, aliased

from rollout_core.records import EpisodeRecord
from storage.bulk_sql import executemany
from storage.models import Episode, EpisodeReward, EpisodeSource, ImportFile, Run
from storage.text_clean import clean_text

_SOURCES = cast(Table, EpisodeSource.__table__)
_REWARDS = cast(Table, EpisodeReward.__table__)
_INSERT_SOURCE = insert(_SOURCES)
_INSERT_REWARD = insert(_REWARDS)
_FILES = cast(Table, ImportFile.__table__)
_INSERT_FILE = insert(_FILES).returning(_FILES.c.id)
_FINISH_FILE = (
    update(_FILES)
    .where(_FILES.c.id == bindparam("b_id"))
    .values(
        episodes=bindparam("b_episodes"),
        skipped_lines=bindparam("b_skipped"),
        rows_gone=bindparam("b_gone"),
        completed_at=bindparam("b_now"),
    )
)

_MARK_GONE = (
    update(_SOURCES)
    .where(_SOURCES.c.episode_id == bindparam("b_episode"))
    .values(gone_file_id=bindparam("b_gone"))
)


def write_extras(conn: Connection, finished: Sequence[tuple[int, EpisodeRecord]]) -> None:
    """The source rows and named rewards of these finished episodes (id, record), in the
    caller's transaction."""
    sources = [
        {
            "episode_id": i,
            "file_id": s.file_id,
            "line": s.line,
            "sha256": s.sha256,
            "regraded": s.regraded,
            "filled_steps": json.dumps(list(s.filled_steps)) if s.filled_steps else None,
            "agent": None if s.agent is None else clean_text(s.agent),
        }
        for i, e in finished
        if (s := e.source) is not None
    ]
    rewards = [
        {"episode_id": i, "name": clean_text(name), "value": float(value)}
        for i, e in finished
        if e.rewards
        for name, value in e.rewards.items()
    ]
    executemany(conn, _INSERT_SOURCE, sources)
    executemany(conn, _INSERT_REWARD, rewards)


@dataclass(frozen=True, slots=True)
class FileBytes:
    """A file an import is about to read: its path under the run's source, and its bytes as
    its digest found them."""

    path: str
    sha256: bytes
    size: int
    rows: int
    """Lines or rows it holds (episodes it can give)."""


@dataclass(frozen=True, slots=True)
class FileStart:
    """A file as `begin_files` found or recorded it."""

    file_id: int
    completed: bool
    """Read whole already: nothing of it to import."""
    earlier: bool
    """The run recorded this path before (this version read in part, or another version):
    it may hold rows of it."""
    replaces: bool = False
    """This version is new, or not the one the path's last whole reading found, and the run
    recorded another version of the path before (a file rewritten, or grown)."""
    gone_before: int = 0
    """Rows of earlier versions that the path's last whole reading (of another version) no
    longer held: what a rewrite had dropped before this version."""
    copy_of: str | None = None
    """Another path of the run whose whole reading found these very bytes: where it holds
    them no more (a step file renamed or moved), nothing of this one to import."""


@dataclass(slots=True)
class _Reading:
    """A reading of a path the run recorded."""

    file_id: int
    sha256: bytes
    completed: bool
    episodes: int


_PATHS_A_QUERY = 500
"""Paths looked up per statement: well under either database's limit on parameters."""


def begin_files(
    session: Session, run_id: int, files: Sequence[FileBytes], now: Any
) -> list[FileStart]:
    """The run's record of each file with its bytes, created where there is none (the run's
    planned episodes grow by their rows then); in `files`' order. A version the path held
    before, but not at its last whole reading, is read again on its old record: the rows the
    last reading marked gone may be back. A file with the bytes of another path's whole
    reading is a copy of it."""
    conn = session.connection()
    known, gone = _readings(conn, run_id, sorted({f.path for f in files}))
    copies = _whole_readings_of(conn, run_id, sorted({f.sha256 for f in files}))
    starts: list[FileStart] = []
    planned = 0
    for f in files:
        versions = known.setdefault(f.path, [])
        same = next((v for v in versions if v.sha256 == f.sha256), None)
        last_whole = next((v for v in reversed(versions) if v.completed), None)
        if same is not None and same is last_whole:
            starts.append(
                FileStart(same.file_id, True, earlier=True, gone_before=gone.get(f.path, 0))
            )
            continue
        # Not a version of this path's own, found again, nor a file of no bytes.
        copy_of = copies.get(f.sha256) if same is None and f.size else None
        earlier, replaces = bool(versions), False
        if same is None:
            replaces = bool(versions)
            same = _Reading(_insert_file(conn, run_id, f, now), f.sha256, False, 0)
            versions.append(same)
            planned += f.rows
        elif same.completed:
            replaces = True
            # Read again on its record (the path's version and row are one): its episodes
            # so far are counted in the run's planned ones already.
            conn.execute(
                update(ImportFile).where(ImportFile.id == same.file_id)
                .values(completed_at=None, rows_gone=None, started_at=now)
            )  # fmt: skip
            same.completed = False
            planned += f.rows - same.episodes
        starts.append(
            FileStart(
                same.file_id, False, earlier=earlier, replaces=replaces,
                gone_before=gone.get(f.path, 0), copy_of=copy_of,
            )
        )  # fmt: skip
    if planned:
        conn.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(episodes_planned=Run.episodes_planned + planned, heartbeat_at=now)
        )
    return starts


def _readings(
    conn: Connection, run_id: int, paths: Sequence[str]
) -> tuple[dict[str, list[_Reading]], dict[str, int]]:
    """path -> its readings, the last whole one last among the whole ones; path -> rows_gone
    of its last whole reading."""
    known: dict[str, list[_Reading]] = {}
    gone: dict[str, int] = {}
    for at in range(0, len(paths), _PATHS_A_QUERY):
        found = conn.execute(
            select(
                ImportFile.id, ImportFile.path, ImportFile.sha256, ImportFile.rows_gone,
                ImportFile.completed_at, ImportFile.episodes,
            )
            .where(
                ImportFile.run_id == run_id, ImportFile.path.in_(paths[at : at + _PATHS_A_QUERY])
            )
            # As `last_reading` orders them: a path's last whole reading comes last here.
            .order_by(ImportFile.completed_at, ImportFile.id)
        )  # fmt: skip
        for file_id, path, sha256, rows_gone, completed_at, episodes in found:
            done = completed_at is not None
            known.setdefault(path, []).append(_Reading(file_id, bytes(sha256), done, episodes))
            if done:
                gone[path] = rows_gone or 0
    return known, gone


def _whole_readings_of(conn: Connection, run_id: int, digests: Sequence[bytes]) -> dict[bytes, str]:
    """SHA-256 -> a path of the run whose whole reading found those bytes."""
    found: dict[bytes, str] = {}
    for at in range(0, len(digests), _PATHS_A_QUERY):
        rows = conn.execute(
            select(ImportFile.sha256, ImportFile.path)
            .where(
                ImportFile.run_id == run_id,
                ImportFile.sha256.in_(digests[at : at + _PATHS_A_QUERY]),
                ImportFile.completed_at.is_not(None),
            )
            .order_by(ImportFile.id)
        )
        for sha256, path in rows:
            found.setdefault(bytes(sha256), path)
    return found


def _insert_file(conn: Connection, run_id: int, f: FileBytes, now: Any) -> int:
    return int(
        conn.execute(
            _INSERT_FILE,
            {"run_id": run_id, "path": clean_text(f.path), "sha256": f.sha256, "bytes": f.size,
             "rows": f.rows, "started_at": now},
        ).scalar_one()
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LastReading:
    """The last reading of a path that ended: the file as it was then."""

    file_id: int
    sha256: bytes
    size: int
    rows: int
    skipped: int


def last_reading(session: Session, run_id: int, path: str) -> LastReading | None:
    """The file at `path` as the run's last whole reading of it found it; None before one."""
    found = session.execute(
        select(
            ImportFile.id, ImportFile.sha256, ImportFile.bytes, ImportFile.rows,
            ImportFile.skipped_lines,
        )
        .where(
            ImportFile.run_id == run_id,
            ImportFile.path == path,
            ImportFile.completed_at.is_not(None),
        )
        .order_by(ImportFile.completed_at.desc(), ImportFile.id.desc())
        .limit(1)
    ).first()  # fmt: skip
    if found is None:
        return None
    return LastReading(found.id, bytes(found.sha256), found.bytes, found.rows, found.skipped_lines)


def stored_digests(
    session: Session, run_id: int, path: str, after: int | None = None
) -> Counter[bytes]:
    """row SHA-256 -> how many rows with those bytes the run holds from files recorded under
    `path` (a rollout can be written twice, word for word); with `after`, only from the files
    recorded after that one, and the rows a rewrite dropped (marked gone), which a version
    grown from that one may hold again."""
    query = (
        select(EpisodeSource.sha256)
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(ImportFile.run_id == run_id, ImportFile.path == path)
    )
    if after is not None:
        query = query.where(or_(ImportFile.id > after, EpisodeSource.gone_file_id.is_not(None)))
    return Counter(bytes(digest) for digest in session.scalars(query))


@dataclass(frozen=True, slots=True)
class FileRead:
    """A file read whole: its record, the rows it was begun with, the bad lines it holds."""

    file_id: int
    path: str
    rows: int
    skipped: int
    earlier: bool
    """Another reading of this path may have counted its bad lines (`FileStart.earlier`)."""
    rows_gone: int
    """Rows of earlier versions of the path that this one no longer holds."""
    gone: Counter[bytes] | None = None
    """Those rows by digest (how many with each bytes), where the reading can tell: it read
    the file from its start, and the run held rows of the path. None leaves the path's rows
    marked as they are."""


def finish_files(session: Session, run_id: int, files: Sequence[FileRead], now: Any) -> list[int]:
    """Mark files read whole, with their bad lines; the episodes each gave. The run's planned
    episodes become what their rows gave. Its skipped lines count each path's bad lines once:
    a reading counts the bad lines of the whole file as it found it, so these replace what the
    path's last reading counted."""
    if not files:
        return []
    conn = session.connection()
    ids = [f.file_id for f in files]
    gave: dict[int, int] = {}
    for at in range(0, len(ids), _PATHS_A_QUERY):
        counted = conn.execute(
            select(EpisodeSource.file_id, func.count())
            .where(EpisodeSource.file_id.in_(ids[at : at + _PATHS_A_QUERY]))
            .group_by(EpisodeSource.file_id)
        )
        gave.update((file_id, int(n)) for file_id, n in counted)
    planned = skipped = 0
    for f in files:
        before = 0
        if f.earlier:
            before = (
                conn.execute(
                    select(ImportFile.skipped_lines)
                    .where(
                        ImportFile.run_id == run_id,
                        ImportFile.path == f.path,
                        ImportFile.id != f.file_id,
                        ImportFile.completed_at.is_not(None),
                    )
                    .order_by(ImportFile.completed_at.desc(), ImportFile.id.desc())
                    .limit(1)
                ).scalar()
                or 0
            )
        planned += gave.get(f.file_id, 0) - f.rows
        skipped += f.skipped - before
    for f in files:
        if f.gone is not None:
            _mark_gone(conn, run_id, f.path, f.file_id, f.gone)
        _drop_abandoned(conn, run_id, f.path, f.file_id)
    conn.execute(
        _FINISH_FILE,
        [
            {"b_id": f.file_id, "b_episodes": gave.get(f.file_id, 0), "b_skipped": f.skipped,
             "b_gone": f.rows_gone, "b_now": now}
            for f in files
        ],
    )  # fmt: skip
    conn.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(
            episodes_planned=Run.episodes_planned + planned,
            skipped_lines=Run.skipped_lines + skipped,
            heartbeat_at=now,
        )
    )
    return [gave.get(f.file_id, 0) for f in files]


def _drop_abandoned(conn: Connection, run_id: int, path: str, file_id: int) -> None:
    """Remove the path's readings of other versions that stopped before their end and gave
    no episode (a `--strict` stop at a bad line since fixed): no import completes them now."""
    read = aliased(ImportFile)
    this = select(read.sha256).where(read.id == file_id).scalar_subquery()
    gave = select(EpisodeSource.episode_id).where(EpisodeSource.file_id == ImportFile.id)
    conn.execute(
        delete(ImportFile).where(
            ImportFile.run_id == run_id,
            ImportFile.path == path,
            ImportFile.completed_at.is_(None),
            ImportFile.sha256 != this,
            ~gave.exists(),
        )
    )


def _mark_gone(
    conn: Connection, run_id: int, path: str, file_id: int, gone: Counter[bytes]
) -> None:
    """Mark as gone, by reading `file_id`, as many of the path's rows with each digest as
    `gone` counts, and no others: a row a rewrite dropped that a later version holds again
    is no longer gone. Rows already marked keep the reading that first found them gone."""
    rows = conn.execute(
        select(EpisodeSource.episode_id, EpisodeSource.sha256, EpisodeSource.gone_file_id)
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(ImportFile.run_id == run_id, ImportFile.path == path)
        # Rows with the same bytes are the same rollout to a digest: the ones marked
        # already stay so first, then those of older readings, this reading's own last.
        .order_by(
            EpisodeSource.gone_file_id.is_(None),
            EpisodeSource.file_id == file_id,
            EpisodeSource.episode_id,
        )
    )
    left = gone.copy()
    mark: list[dict[str, int | None]] = []
    for episode_id, sha256, gone_file_id in rows:
        digest = bytes(sha256)
        if left[digest] > 0:
            left[digest] -= 1
            if gone_file_id is None:
                mark.append({"b_episode": episode_id, "b_gone": file_id})
        elif gone_file_id is not None:
            mark.append({"b_episode": episode_id, "b_gone": None})
    if mark:
        conn.execute(_MARK_GONE, mark)


def gone_episodes(run_id: int) -> Select[Any]:
    """The run's imported episodes whose rows a rewrite of their file dropped (read from the
    few marked rows' index)."""
    return (
        select(EpisodeSource.episode_id)
        .join(ImportFile, ImportFile.id == EpisodeSource.gone_file_id)
        .where(ImportFile.run_id == run_id)
    )


def step_groups(session: Session, run_id: int, train_step: int) -> dict[str, int]:
    """question id -> GRPO group of the run's episodes at a training step (the last group,
    for a question with several), read from the training index."""
    # The step's rows, the last group taken here: with GROUP BY question_id, SQLite read the
    # question index over the whole run (and each episode's row) to have the groups in order.
    rows = session.execute(
        select(Episode.question_id, Episode.group_index).where(
            Episode.run_id == run_id,
            Episode.train_step == train_step,
            Episode.group_index.is_not(None),
        )
    )
    groups: dict[str, int] = {}
    for question_id, group in rows:
        if group is not None and group >= groups.get(question_id, group):
            groups[question_id] = int(group)
    return groups


def question_ids(session: Session, run_id: int) -> list[str]:
    """The ids of the questions the run's episodes ask."""
    return list(
        session.scalars(select(Episode.question_id).where(Episode.run_id == run_id).distinct())
    )


def rekey_questions(session: Session, run_id: int, renamed: Mapping[str, str]) -> int:
    """Move the run's episodes of each old question id to its new id; returns how many moved.
    Samples the run holds under the new id keep their indexes, the moved ones follow them."""
    moved = 0
    for old, new in renamed.items():
        held = session.scalar(
            select(func.max(Episode.sample_index)).where(
                Episode.run_id == run_id, Episode.question_id == new
            )
        )
        offset = 0 if held is None else int(held) + 1
        done = session.connection().execute(
            update(Episode)
            .where(Episode.run_id == run_id, Episode.question_id == old)
            .values(question_id=new, sample_index=Episode.sample_index + offset)
        )
        moved += done.rowcount
    return moved


def own_runs_mark(session: Session) -> tuple[int, ...]:
    """What changes when rollscope's own runs play more (runs made, episodes finished): read
    from the runs table alone, it tells whether `own_questions` may have changed."""
    row = session.execute(
        select(func.count(), func.max(Run.id), func.sum(Run.finished_episodes)).where(
            Run.source_format.is_(None)
        )
    ).one()
    return tuple(int(v or 0) for v in row)


def own_questions(session: Session) -> list[tuple[str, str]]:
    """(question text, question id) of the questions rollscope's own runs played (not
    imported or recorded ones), each run's once: its first samples' rows."""
    own_runs = select(Run.id).where(Run.source_format.is_(None))
    rows = session.execute(
        select(Episode.question, Episode.question_id)
        .where(Episode.run_id.in_(own_runs), Episode.sample_index == 0)
        .distinct()
    )
    return [(text, qid) for text, qid in rows]


def agents_of(session: Session, run_ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """The agents whose traces each of these runs holds, in the order the files first name them,
    for the runs whose files name any (a verifiers v1 episode's line holds a trace per trained
    agent)."""
    found: dict[int, list[str]] = {}
    for run_id, agent in session.execute(
        select(ImportFile.run_id, EpisodeSource.agent)
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(ImportFile.run_id.in_(run_ids))
        .group_by(ImportFile.run_id, EpisodeSource.agent)
        .order_by(ImportFile.run_id, func.min(EpisodeSource.episode_id))
    ):
        if agent is not None:  # the rows of files that name no agent
            found.setdefault(run_id, []).append(agent)
    return {run_id: tuple(names) for run_id, names in found.items()}


@dataclass(frozen=True, slots=True)
class EpisodeOrigin:
    """Where an imported episode came from and what rollscope made of it (Replay's line)."""

    path: str | None
    """The file, relative to the run's `source_path`; None for a recorded (not imported) one."""
    line: int | None
    regraded: str | None
    filled_steps: tuple[int, ...]
    rewards: Mapping[str, float]
    agent: str | None = None
    """The agent whose trace of its line it is, where the file names one."""
    gone: bool = False
    """A later version of its file no longer holds its row (the file was rewritten)."""


def origins(session: Session, episode_ids: Sequence[int]) -> dict[int, EpisodeOrigin]:
    """The source rows and named rewards of these episodes (those that have either)."""
    if not episode_ids:
        return {}
    rewards: dict[int, dict[str, float]] = {}
    for episode_id, name, value in session.execute(
        select(EpisodeReward.episode_id, EpisodeReward.name, EpisodeReward.value).where(
            EpisodeReward.episode_id.in_(episode_ids)
        )
    ):
        rewards.setdefault(episode_id, {})[name] = value
    out: dict[int, EpisodeOrigin] = {}
    for episode_id, path, line, regraded, filled, agent, gone_file_id in session.execute(
        select(
            EpisodeSource.episode_id,
            ImportFile.path,
            EpisodeSource.line,
            EpisodeSource.regraded,
            EpisodeSource.filled_steps,
            EpisodeSource.agent,
            EpisodeSource.gone_file_id,
        )
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(EpisodeSource.episode_id.in_(episode_ids))
    ):
        steps = tuple(json.loads(filled)) if filled else ()
        named = rewards.pop(episode_id, {})
        out[episode_id] = EpisodeOrigin(
            path, line, regraded, steps, named, agent, gone=gone_file_id is not None
        )
    for episode_id, named in rewards.items():
        out[episode_id] = EpisodeOrigin(None, None, None, (), named)
    return out
