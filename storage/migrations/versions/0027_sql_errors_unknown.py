"""`episodes.has_sql_error` is NULL where rollscope's environment did not run the episode's SQL
(a Recorder's rollout, an import's without its question: their `progress` is NULL), where it
read 0: `AVG(has_sql_error)` over such a run said "no query failed", of queries nobody here
ran. Their framework's verdict, if any, is in the steps' `observation`.

The episodes table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place); its ids
stay, and with them everything that points at them. Downgrading writes 0 back.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | None = None
depends_on: str | None = None


def _nullable(nullable: bool) -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.alter_column(
            "has_sql_error",
            existing_type=sa.Boolean(),
            nullable=nullable,
            # No default: an episode written without saying holds NULL, not "no error".
            server_default=None if nullable else sa.false(),
        )


def upgrade() -> None:
    _nullable(True)
    op.execute(
        "UPDATE episodes SET has_sql_error = NULL WHERE progress IS NULL "
        "AND run_id IN (SELECT id FROM runs WHERE source_format IS NOT NULL)"
    )


def downgrade() -> None:
    op.execute("UPDATE episodes SET has_sql_error = false WHERE has_sql_error IS NULL")
    _nullable(False)
