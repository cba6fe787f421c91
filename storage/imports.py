"""Imported runs in the store: the files an import read, the row each episode came from, and
every episode's rewards by name.

The sink writes an episode's source row and named rewards with its finish (`write_extras`,
from `writes.write_batch`, only for records that carry them). The rest is the import's own
bookkeeping, one short transaction a file: a file is recorded when its reading starts
(`begin_file`) and completed when its last row is in (`finish_file`); a file read whole is
found again by its path and SHA-256 and not read again, and a file read in part, or grown
since (an appending writer), is read on past the rows the run holds (found by their digest).
A JSONL file that still begins with the bytes its last whole reading found (`last_reading`)
is read on from where that reading ended.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, select, update
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeRecord
from storage.bulk_sql import executemany
from storage.models import Episode, EpisodeReward, EpisodeSource, ImportFile, Run
from storage.text_clean import clean_text

_SOURCES = cast(Table, EpisodeSource.__table__)
_REWARDS = cast(Table, EpisodeReward.__table__)
_INSERT_SOURCE = insert(_SOURCES)
_INSERT_REWARD = insert(_REWARDS)


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
class FileStart:
    """A file as `begin_file` found or recorded it."""

    file_id: int
    completed: bool
    """Read whole already: nothing of it to import."""


def begin_file(
    session: Session, run_id: int, path: str, sha256: bytes, size: int, rows: int, now: Any
) -> FileStart:
    """The run's record of the file at `path` with these bytes, created when there is none
    (the run's planned episodes grow by its rows then)."""
    found = session.execute(
        select(ImportFile.id, ImportFile.completed_at).where(
            ImportFile.run_id == run_id, ImportFile.path == path, ImportFile.sha256 == sha256
        )
    ).first()
    if found is not None:
        return FileStart(found.id, found.completed_at is not None)
    file = ImportFile(
        run_id=run_id,
        path=clean_text(path),
        sha256=sha256,
        bytes=size,
        rows=rows,
        started_at=now,
    )
    session.add(file)
    session.flush()
    session.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(episodes_planned=Run.episodes_planned + rows, heartbeat_at=now)
    )
    return FileStart(file.id, False)


@dataclass(frozen=True, slots=True)
class FileReading:
    """The last reading of a path that ended: the file as it was then."""

    file_id: int
    sha256: bytes
    size: int
    rows: int
    skipped: int


def last_reading(session: Session, run_id: int, path: str) -> FileReading | None:
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
    return FileReading(found.id, bytes(found.sha256), found.bytes, found.rows, found.skipped_lines)


def stored_digests(
    session: Session, run_id: int, path: str, after: int | None = None
) -> Counter[bytes]:
    """row SHA-256 -> how many rows with those bytes the run holds from files recorded under
    `path` (a rollout can be written twice, word for word); with `after`, only from the files
    recorded after that one."""
    query = (
        select(EpisodeSource.sha256)
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(ImportFile.run_id == run_id, ImportFile.path == path)
    )
    if after is not None:
        query = query.where(ImportFile.id > after)
    return Counter(bytes(digest) for digest in session.scalars(query))


def finish_file(session: Session, file_id: int, skipped: int, now: Any) -> int:
    """Mark a file read whole, with the lines it skipped; returns the episodes it gave. The
    run's planned episodes become what its rows gave. Its skipped lines count each path's
    bad lines once: a file read again (grown, or rewritten) is read whole, its bad lines with
    it, so these replace what the path's last reading counted."""
    file = session.get(ImportFile, file_id)
    assert file is not None
    episodes = int(
        session.scalar(select(func.count()).where(EpisodeSource.file_id == file_id)) or 0
    )
    counted_before = session.scalar(
        select(ImportFile.skipped_lines)
        .where(
            ImportFile.run_id == file.run_id,
            ImportFile.path == file.path,
            ImportFile.id != file_id,
            ImportFile.completed_at.is_not(None),
        )
        .order_by(ImportFile.completed_at.desc(), ImportFile.id.desc())
        .limit(1)
    )
    session.execute(
        update(Run)
        .where(Run.id == file.run_id)
        .values(
            episodes_planned=Run.episodes_planned + episodes - file.rows,
            skipped_lines=Run.skipped_lines + skipped - (counted_before or 0),
            heartbeat_at=now,
        )
    )
    file.episodes, file.skipped_lines, file.completed_at = episodes, skipped, now
    return episodes


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


@dataclass(frozen=True, slots=True)
class ImportedFile:
    """One file of an import run, as the store keeps it."""

    path: str
    sha256: str
    """Hex, as `sha256sum` prints it."""
    bytes: int
    rows: int
    episodes: int
    skipped_lines: int
    completed: bool


def files_of(session: Session, run_id: int) -> list[ImportedFile]:
    """The run's files, in the order they were first read."""
    rows = session.scalars(
        select(ImportFile).where(ImportFile.run_id == run_id).order_by(ImportFile.id)
    )
    return [
        ImportedFile(
            f.path,
            bytes(f.sha256).hex(),
            f.bytes,
            f.rows,
            f.episodes,
            f.skipped_lines,
            f.completed_at is not None,
        )
        for f in rows
    ]


@dataclass(frozen=True, slots=True)
class EpisodeOrigin:
    """Where an imported episode came from and what rollscope made of it (Replay's line)."""

    path: str | None
    """The file, relative to the run's `source_path`; None for a recorded (not imported) one."""
    line: int | None
    regraded: str | None
    filled_steps: tuple[int, ...]
    rewards: Mapping[str, float]


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
    for episode_id, path, line, regraded, filled in session.execute(
        select(
            EpisodeSource.episode_id,
            ImportFile.path,
            EpisodeSource.line,
            EpisodeSource.regraded,
            EpisodeSource.filled_steps,
        )
        .join(ImportFile, ImportFile.id == EpisodeSource.file_id)
        .where(EpisodeSource.episode_id.in_(episode_ids))
    ):
        steps = tuple(json.loads(filled)) if filled else ()
        out[episode_id] = EpisodeOrigin(path, line, regraded, steps, rewards.pop(episode_id, {}))
    for episode_id, named in rewards.items():
        out[episode_id] = EpisodeOrigin(None, None, None, (), named)
    return out
