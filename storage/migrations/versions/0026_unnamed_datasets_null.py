"""`episodes.db_id`, `episodes.gold_sql` and `runs.dataset` are NULL where nothing names them
(an import without `--questions` of files that do not, a Recorder given none), where they held
`''`: `WHERE gold_sql IS NULL` found no episode without a reference query, and pandas'
`isna()` none either. The write path now stores NULL for an empty name; this revision
rewrites the rows written before.

The episodes and runs tables are rebuilt on SQLite (a NOT NULL column cannot be relaxed in
place); their ids stay, and with them everything that points at them. Downgrading writes `''`
back.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | None = None
depends_on: str | None = None

_COLUMNS = (
    ("episodes", "db_id", sa.String(200)),
    ("episodes", "gold_sql", sa.Text()),
    ("runs", "dataset", sa.Text()),
)


def _nullable(nullable: bool) -> None:
    for table in ("episodes", "runs"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for of, column, kind in _COLUMNS:
                if of == table:
                    batch_op.alter_column(column, existing_type=kind, nullable=nullable)


def upgrade() -> None:
    _nullable(True)
    for table, column, _ in _COLUMNS:
        op.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} = ''")


def downgrade() -> None:
    for table, column, _ in _COLUMNS:
        op.execute(f"UPDATE {table} SET {column} = '' WHERE {column} IS NULL")
    _nullable(False)
