"""An episode rollscope did not play (an import's, a Recorder's) has no `seed`, `started_at` or
`ended_at`: its sampling ran in another framework under a seed no file records, at times no
file records either. They held 0 (a real seed, read as "played with seed 0" by anyone
grouping episodes by their seed) and the time of the import.

The episodes table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place); its
ids stay, and with them the steps, sources, rewards, notes and search index that point at
them. Downgrading writes 0 back, and the run's creation time for the times.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | None = None
depends_on: str | None = None

_PLAYED_ELSEWHERE = "run_id IN (SELECT id FROM runs WHERE source_format IS NOT NULL)"
_RUN_CREATED = "(SELECT r.created_at FROM runs r WHERE r.id = episodes.run_id)"


def _nullable(nullable: bool) -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.alter_column("seed", existing_type=sa.BigInteger(), nullable=nullable)
        batch_op.alter_column(
            "started_at", existing_type=sa.DateTime(timezone=True), nullable=nullable
        )


def upgrade() -> None:
    _nullable(True)
    op.execute(
        "UPDATE episodes SET seed = NULL, started_at = NULL, ended_at = NULL "
        f"WHERE {_PLAYED_ELSEWHERE}"
    )


def downgrade() -> None:
    op.execute("UPDATE episodes SET seed = 0 WHERE seed IS NULL")
    op.execute(f"UPDATE episodes SET started_at = {_RUN_CREATED} WHERE started_at IS NULL")
    op.execute(
        f"UPDATE episodes SET ended_at = {_RUN_CREATED} "
        "WHERE ended_at IS NULL AND outcome IS NOT NULL"
    )
    _nullable(False)
