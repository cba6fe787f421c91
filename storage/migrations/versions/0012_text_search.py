"""An index for the episode text search (`storage.text_search` says what it holds and how a
search reads it).

SQLite: the FTS5 trigram table `episode_text`, filled here with every finished episode's
texts, and a partial index of the unfinished episodes. PostgreSQL: the pg_trgm extension
(created when missing) and GIN trigram indexes on the three searched columns.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

from storage.engine import StoreError
from storage.text_search import INDEX_TABLE, PG_INDEXES, UNFINISHED_INDEX, index_all_finished

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _create_fts(conn)
        op.create_index(
            UNFINISHED_INDEX, "episodes", ["id"], sqlite_where=sa.text("outcome IS NULL")
        )
        index_all_finished(conn)
    elif conn.dialect.name == "postgresql":
        _create_pg_trgm(conn)
        for name, (table, col) in PG_INDEXES.items():
            op.create_index(
                name, table, [col], postgresql_using="gin", postgresql_ops={col: "gin_trgm_ops"}
            )


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        op.drop_index(UNFINISHED_INDEX, table_name="episodes")
        op.execute(f"DROP TABLE {INDEX_TABLE}")
    elif conn.dialect.name == "postgresql":
        for name, (table, _) in PG_INDEXES.items():
            op.drop_index(name, table_name=table)


def _create_fts(conn: sa.Connection) -> None:
    try:
        conn.exec_driver_sql(
            f"CREATE VIRTUAL TABLE {INDEX_TABLE} USING fts5(text, content='', "
            "tokenize='trigram', detail='none', columnsize=0)"
        )
    except sa.exc.OperationalError as exc:
        # No FTS5 compiled in, or a SQLite before 3.34 (no trigram tokenizer).
        raise StoreError(
            f"this Python's SQLite {sqlite3.sqlite_version} cannot build the text search "
            f"index ({exc.orig}): use a Python whose sqlite3 has FTS5 and SQLite 3.34 or later"
        ) from None


def _create_pg_trgm(conn: sa.Connection) -> None:
    if conn.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").first():
        return
    try:
        conn.exec_driver_sql("CREATE EXTENSION pg_trgm")
    except sa.exc.DBAPIError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise StoreError(
            f"the text search needs PostgreSQL's pg_trgm extension, and creating it failed "
            f"({reason}): have the database's owner run CREATE EXTENSION pg_trgm; in it"
        ) from None
