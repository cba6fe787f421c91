"""The episode text search's index: which episodes may hold a text, so that a search need
not read them all.

A search means what `reads.episode_conditions` says, and that always decides: LIKE's
substring match, case-insensitive for ASCII letters (ILIKE on PostgreSQL), in the question,
the gold SQL and every model output of an episode. The index holds trigrams (each run of
three characters) and only narrows which episodes that LIKE reads: an episode that holds a
text holds each of its trigrams.

What is indexed:
- SQLite: `episode_text`, an FTS5 table with the trigram tokenizer, one row per finished
  episode (rowid = episode id) over its question, gold SQL and distinct outputs, one after
  the other. Contentless and `detail=none`: it keeps which episodes hold each trigram, not
  where, and no copy of the text; it finds the episodes holding all of a text's trigrams
  anywhere, a few more than hold the text. A partial index, `ix_episodes_unfinished`, lists
  the episodes not finished yet, which it does not hold. Each transaction writes the index
  a segment; it merges them sixteen at a time (`MERGED_SEGMENTS`), not FTS5's four, so a
  segment's rows are written again at fewer levels as the store grows. That is a setting
  the index keeps, given on opening a store to write (`keep_settings`).
  The samples of a question repeat its question and gold SQL (a GRPO group, a training run
  asking it again at every epoch), and those were most of the indexing's work. So an
  episode whose two texts equal those of its question's first sample (sample 0 of the same
  run and question id), finished already, leaves them out of its row; a search that matches
  a first sample's row also reads the other episodes of its question.
- PostgreSQL: pg_trgm GIN indexes on `episodes.question`, `episodes.gold_sql` and
  `steps.raw_output`, which PostgreSQL uses for ILIKE.

How it is kept current: on SQLite the write path indexes an episode in the transaction that
finishes it (`index_episodes`, from `writes.write_batch`; the synthetic filler calls it too),
and migration 0012 indexed the episodes finished before it. A finished episode's texts never
change, and it is deleted only with its whole run: a first sample's row stays as long as the
samples that leave their texts to it. Deleting a run leaves its rows (a contentless FTS5
table forgets a row only when given its text again): they name no episode, or a later one
that took the same id, which LIKE then reads and rejects. PostgreSQL keeps its indexes on
every write.

What a search reads (`candidates`): the index's hits for the text, with the other episodes
of the first samples' questions among them, counted up to `CANDIDATE_CAP`. Under it, the
page reads only those episodes (on SQLite, and the unfinished ones) and LIKE checks each: a
word no episode holds reads next to nothing. A text under three characters has no trigram,
and one with more hits is common enough that reading the newest episodes fills a page soon
(or a phrase of common words, which on SQLite can have many more hits than holders): those
are searched by LIKE over the episodes the other filters select, within the filter's
`text_newest`, as without the index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Integer,
    Select,
    TextualSelect,
    and_,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
    text,
    union_all,
)
from sqlalchemy.orm import Session, aliased

from storage.models import Episode, Step
from storage.reads import like_pattern
from storage.text_clean import clean_text

SearchIds = Select[Any] | CompoundSelect[Any] | TextualSelect
"""A query of episode ids, for `Episode.id.in_(...)`."""

INDEX_TABLE = "episode_text"
UNFINISHED_INDEX = "ix_episodes_unfinished"
PG_INDEXES = {
    "ix_episodes_question_trgm": ("episodes", "question"),
    "ix_episodes_gold_sql_trgm": ("episodes", "gold_sql"),
    "ix_steps_raw_output_trgm": ("steps", "raw_output"),
}
"""The PostgreSQL GIN indexes: name -> (table, column)."""

MERGED_SEGMENTS = 16
"""FTS5's `automerge`: segments of a level merged into one of the next."""

MIN_CHARS = 3
"""The trigram tokenizer's token length: a shorter text has nothing to look up."""

CANDIDATE_CAP = 10_000
"""Index hits above which a text counts as common and is searched by LIKE alone: each hit is
an episode LIKE must then read, where a common text fills a page from the newest few."""

_MAX_TRIGRAMS = 64
"""Trigrams of a text looked up at most: any of them narrow correctly, and a long pasted text
would make an AND of thousands."""

_SHARED = (
    "e.sample_index > 0 AND EXISTS (SELECT 1 FROM episodes AS f WHERE f.run_id = e.run_id "
    "AND f.question_id = e.question_id AND f.sample_index = 0 AND f.outcome IS NOT NULL "
    "AND f.question = e.question AND f.gold_sql IS e.gold_sql)"
)
"""Whether the episode's question and gold SQL are its question's first sample's, which is
finished and so indexed with them: one (unique) index lookup and one row."""

_DOCUMENT = (
    f"CASE WHEN {_SHARED} THEN '' "
    "ELSE e.question || char(10) || coalesce(e.gold_sql, '') || char(10) END "
    "|| coalesce((SELECT group_concat(DISTINCT s.raw_output) FROM steps AS s "
    "WHERE s.episode_id = e.id), '')"
)
"""An episode's indexed text. The order of its parts and the separators matter not: a
trigram that spans two of them only adds a hit LIKE rejects."""

_INDEX_EPISODES = (
    f"INSERT INTO {INDEX_TABLE} (rowid, text) SELECT e.id, {_DOCUMENT} FROM episodes AS e "
    "WHERE e.id IN (SELECT value FROM json_each(?))"
)
_INDEX_FINISHED = (
    f"INSERT INTO {INDEX_TABLE} (rowid, text) SELECT e.id, {_DOCUMENT} FROM episodes AS e "
    "WHERE e.outcome IS NOT NULL"
)

_FTS = table(INDEX_TABLE, column("rowid", Integer))
# Named: without statistics on the (small) partial index, SQLite scans a whole other one.
_UNFINISHED = text(
    f"SELECT id FROM episodes INDEXED BY {UNFINISHED_INDEX} WHERE outcome IS NULL"
).columns(column("id", Integer))


def search_objects() -> set[str]:
    """Names of the tables and indexes this module adds beside `storage.models`' schema (the
    FTS5 table's shadow tables included)."""
    shadows = {f"{INDEX_TABLE}_{s}" for s in ("data", "idx", "config", "docsize", "content")}
    return {INDEX_TABLE, UNFINISHED_INDEX, *shadows, *PG_INDEXES}


def in_models(name: str | None, _type: str, _parents: object) -> bool:
    """Alembic's `include_name` hook: False for this module's tables and indexes, so schema
    comparisons with `storage.models` leave them alone."""
    return name not in search_objects()


def keep_settings(conn: Connection) -> None:
    """Give the SQLite index its settings where it lacks them (a store made before they were
    chosen); a write, so only on a store opened to write."""
    config = f"SELECT v FROM {INDEX_TABLE}_config WHERE k = 'automerge'"
    if conn.exec_driver_sql(config).scalar() != MERGED_SEGMENTS:
        conn.exec_driver_sql(
            f"INSERT INTO {INDEX_TABLE} ({INDEX_TABLE}, rank) "
            f"VALUES ('automerge', {MERGED_SEGMENTS})"
        )


def index_episodes(conn: Connection, episode_ids: Sequence[int]) -> None:
    """Index these just-finished episodes' texts (SQLite; PostgreSQL indexes on its own)."""
    if episode_ids and conn.dialect.name == "sqlite":
        conn.exec_driver_sql(_INDEX_EPISODES, (json.dumps(list(episode_ids)),))


def index_all_finished(conn: Connection) -> None:
    """Index every finished episode's texts, into an empty index (the migration)."""
    conn.exec_driver_sql(_INDEX_FINISHED)


def candidates(session: Session, needle: str) -> SearchIds | None:
    """Ids of the episodes that may hold `needle` (a superset: LIKE decides), or None when the
    index cannot narrow it: too short, or more than `CANDIDATE_CAP` hits."""
    if len(needle) < MIN_CHARS:
        return None
    if session.get_bind().dialect.name == "sqlite":
        return _indexed_candidates(session, needle)
    pattern = like_pattern(needle)
    in_episodes = or_(
        Episode.question.ilike(pattern, escape="\\"),
        Episode.gold_sql.ilike(pattern, escape="\\"),
    )
    hits = union_all(
        select(Episode.id).where(in_episodes),
        select(Step.episode_id).where(Step.raw_output.ilike(pattern, escape="\\")),
    )
    counted = select(func.count()).select_from(hits.limit(CANDIDATE_CAP + 1).subquery())
    if int(session.scalar(counted) or 0) > CANDIDATE_CAP:
        return None
    return hits


def _indexed_candidates(session: Session, needle: str) -> SearchIds | None:
    """SQLite: the episodes the FTS5 table matches, with the other samples of a matched first
    sample's question (indexed without the texts they share with it, `_SHARED`), and the
    unfinished ones. Read here once, then bound as one JSON list to the page's query."""
    query = literal_column(INDEX_TABLE).op("MATCH")(fts_query(needle))
    matched = session.scalars(select(_FTS.c.rowid).where(query).limit(CANDIDATE_CAP + 1)).all()
    if len(matched) > CANDIDATE_CAP:
        return None
    first = aliased(Episode, name="first")
    same_question = (
        select(Episode.id)
        .join(
            first,
            and_(first.run_id == Episode.run_id, first.question_id == Episode.question_id),
        )
        .where(first.id.in_(_json_ids(matched)), first.sample_index == 0)
        .limit(CANDIDATE_CAP + 1)
    )
    ids = {*matched, *session.scalars(same_question)}
    if len(ids) > CANDIDATE_CAP:
        return None
    return union_all(_json_ids(sorted(ids)), _UNFINISHED)


def _json_ids(ids: Sequence[int]) -> Select[Any]:
    """A query of these ids, bound as one JSON text (one parameter however many they are)."""
    listed = func.json_each(json.dumps(list(ids))).table_valued("value")
    return select(listed.c.value)


def fts_query(needle: str) -> str:
    """An FTS5 query for the episodes holding every trigram of `needle` (at least three
    characters). Each trigram is an FTS5 string: quotes doubled, nothing else special; the
    tokenizer folds its case as it folded the indexed text's."""
    needle = clean_text(needle)  # NUL as stored texts hold it (the query parser ends at it)
    ends = range(MIN_CHARS, len(needle) + 1)
    grams = dict.fromkeys(needle[i - MIN_CHARS : i] for i in ends)
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in list(grams)[:_MAX_TRIGRAMS])
