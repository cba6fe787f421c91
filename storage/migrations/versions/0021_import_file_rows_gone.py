"""Each reading of an imported file counts the rows of earlier versions it no longer holds
(`import_files.rows_gone`): a file rewritten twice was compared with the rows of every
version before it, so the second rewrite counted again what the first had dropped, and a line
repaired in it made a new generation of the step.

A path's first reading that completed gets 0 (there was nothing earlier to lose); later
readings keep NULL, their count not taken when they were read.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("import_files", sa.Column("rows_gone", sa.Integer(), nullable=True))
    op.execute(
        """
        UPDATE import_files SET rows_gone = 0
        WHERE completed_at IS NOT NULL
          AND id IN (SELECT min(id) FROM import_files GROUP BY run_id, path)
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("import_files", schema=None) as batch_op:
        batch_op.drop_column("rows_gone")
