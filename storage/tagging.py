"""Annotations in SQL: a person's tag and note on a run, an episode or a step.

One row per (target, tag): labelling a target again with the same tag replaces its note. A run's
own labels (`Store.tag_run`, what the older `run_tags` table held) are rows without an episode.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rollout_core.errors import RollscopeError
from storage.models import Annotation, Episode
from storage.read_models import Annotation as AnnotationRecord
from storage.read_models import TagCount
from storage.text_clean import clean_json
from storage.writes import now_utc

MAX_TAG = 100
"""Characters in a tag: a label to filter by, not a sentence (the note holds those)."""
MAX_NOTE = 10_000
MAX_AUTHOR = 200


class AnnotationError(RollscopeError, ValueError):
    """A tag, note or target that cannot be stored; the message names it and the fix."""


def clean_tag(tag: str) -> str:
    """The tag as stored (surrounding blanks removed); AnnotationError when it is unusable."""
    cleaned = tag.strip()
    if not cleaned:
        raise AnnotationError("the tag is empty; give a short label such as wrong-join")
    if len(cleaned) > MAX_TAG:
        raise AnnotationError(
            f"the tag is {len(cleaned)} characters long; keep it to {MAX_TAG} "
            "(put longer text in the note)"
        )
    if any(unicodedata.category(ch).startswith("C") for ch in cleaned):
        raise AnnotationError(
            "the tag holds a line break, a control character or a byte that is not UTF-8; use "
            "one line of text"
        )
    return cleaned


def clean_note(note: str | None) -> str | None:
    """The note as stored (None when blank); AnnotationError when it is too long."""
    if note is None or not note.strip():
        return None
    if len(note) > MAX_NOTE:
        raise AnnotationError(f"the note is {len(note)} characters long; keep it to {MAX_NOTE}")
    return str(clean_json(note.strip()))


def annotate_episode(
    session: Session,
    episode_id: int,
    tag: str,
    note: str | None,
    step: int | None,
    author: str | None,
) -> AnnotationRecord:
    """Insert or replace the (episode, step, tag) annotation in the caller's transaction."""
    tag, note = clean_tag(tag), clean_note(note)
    row = session.execute(
        select(Episode.run_id, Episode.steps).where(Episode.id == episode_id)
    ).one_or_none()
    if row is None:
        raise AnnotationError(f"no episode {episode_id} in the store")
    run_id, steps = row
    if step is not None and not 1 <= step <= steps:
        raise AnnotationError(
            f"episode {episode_id} has {steps} step{'s' if steps != 1 else ''}; "
            f"choose a step from 1 to {steps}, or none for the whole episode"
        )
    step_no = 0 if step is None else step
    who, when = _author(author), now_utc()
    values = {
        "run_id": run_id,
        "episode_id": episode_id,
        "step_no": step_no,
        "tag": tag,
        "note": note,
        "author": who,
        "created_at": when,
    }
    # One statement: another writer tagging the same target at once (PostgreSQL, several
    # people) is replaced, where a delete then an insert would break the unique index.
    module = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = module.insert(Annotation).values(values)
    stmt = stmt.on_conflict_do_update(
        index_elements=[Annotation.episode_id, Annotation.step_no, Annotation.tag],
        set_={k: stmt.excluded[k] for k in ("run_id", "note", "author", "created_at")},
    )
    new_id = session.execute(stmt.returning(Annotation.id)).scalar_one()
    return AnnotationRecord(
        id=new_id,
        step=step,
        tag=tag,
        note=note,
        author=who,
        created_at=when,
    )


def remove_episode_annotation(
    session: Session, episode_id: int, tag: str, step: int | None
) -> bool:
    """Delete the (episode, step, tag) annotation; False when there was none."""
    result = session.execute(
        delete(Annotation).where(
            Annotation.episode_id == episode_id,
            Annotation.step_no == (0 if step is None else step),
            Annotation.tag == tag.strip(),
        )
    )
    return int(result.rowcount) > 0  # type: ignore[attr-defined]


def episode_annotations(
    session: Session, episode_ids: Sequence[int]
) -> dict[int, list[AnnotationRecord]]:
    """The annotations of each episode, oldest first."""
    found: dict[int, list[AnnotationRecord]] = {i: [] for i in episode_ids}
    if not episode_ids:
        return found
    rows = session.scalars(
        select(Annotation)
        .where(Annotation.episode_id.in_(episode_ids))
        .order_by(Annotation.episode_id, Annotation.created_at, Annotation.id)
    )
    for a in rows:
        assert a.episode_id is not None
        found[a.episode_id].append(record(a))
    return found


def tag_counts(session: Session, run_ids: Sequence[int]) -> list[TagCount]:
    """Tags on the runs' episodes (every run's when none given), most used first."""
    stmt = select(Annotation.tag, func.count(func.distinct(Annotation.episode_id))).where(
        Annotation.episode_id.is_not(None)
    )
    if run_ids:
        stmt = stmt.where(Annotation.run_id.in_(run_ids))
    rows = session.execute(stmt.group_by(Annotation.tag))
    counts = [TagCount(tag, int(n)) for tag, n in rows]
    return sorted(counts, key=lambda c: (-c.episodes, c.tag))


def set_run_label(session: Session, run_id: int, name: str, value: str) -> None:
    """Set a run's name/value label, replacing that name's earlier value."""
    session.execute(
        delete(Annotation).where(
            Annotation.run_id == run_id, Annotation.episode_id.is_(None), Annotation.tag == name
        )
    )
    label = Annotation(run_id=run_id, episode_id=None, step_no=0, tag=name, note=value)
    label.created_at = now_utc()
    session.add(label)


def run_labels(session: Session, run_id: int) -> dict[str, str]:
    """A run's name/value labels, by name."""
    rows = session.execute(
        select(Annotation.tag, Annotation.note)
        .where(Annotation.run_id == run_id, Annotation.episode_id.is_(None))
        .order_by(Annotation.tag, Annotation.id)
    )
    return {tag: note or "" for tag, note in rows}


def record(a: Annotation) -> AnnotationRecord:
    """The read model of an annotation row."""
    return AnnotationRecord(
        id=a.id,
        step=a.step_no or None,
        tag=a.tag,
        note=a.note,
        author=a.author,
        created_at=a.created_at,
    )


def _author(author: str | None) -> str | None:
    if author is None or not author.strip():
        return None
    return str(clean_json(author.strip()[:MAX_AUTHOR]))
