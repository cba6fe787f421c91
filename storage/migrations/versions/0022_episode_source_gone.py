"""An imported episode whose row a rewrite of its file dropped says so
(`episode_sources.gone_file_id`, the reading that no longer found it): the Training page
draws a step a resumed trainer played again from what its file holds now, where it averaged
both plays.

Rows dropped by rewrites read before this revision stay NULL: which rows those were was
never recorded (`import_files.rows_gone` counted them). The next rewrite of such a file
marks every row of the path it no longer holds.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | None = None
depends_on: str | None = None

_GONE = "gone_file_id IS NOT NULL"


def upgrade() -> None:
    # Batch mode: SQLite adds a column's foreign key only by copying the table.
    with op.batch_alter_table("episode_sources", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gone_file_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_episode_sources_gone_file_id_import_files"),
            "import_files",
            ["gone_file_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch_op.create_index(
            batch_op.f("ix_episode_sources_gone_file_id"),
            ["gone_file_id"],
            sqlite_where=sa.text(_GONE),
            postgresql_where=sa.text(_GONE),
        )


def downgrade() -> None:
    with op.batch_alter_table("episode_sources", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episode_sources_gone_file_id"))
        batch_op.drop_constraint(
            batch_op.f("fk_episode_sources_gone_file_id_import_files"), type_="foreignkey"
        )
        batch_op.drop_column("gone_file_id")
