"""An episode's `seed` is NULL for a rollout rollscope did not play (an import's, a Recorder's):
its sampling ran in another framework, under a seed no file records. It held 0, a real seed,
which read as "played with seed 0" to anyone grouping episodes by their seed.

The episodes table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place); its
ids stay, and with them the steps, sources, rewards, notes and search index that point at
them. Downgrading writes 0 back.

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


def _nullable(nullable: bool) -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.alter_column("seed", existing_type=sa.BigInteger(), nullable=nullable)


def upgrade() -> None:
    _nullable(True)
    op.execute(
        "UPDATE episodes SET seed = NULL "
        "WHERE run_id IN (SELECT id FROM runs WHERE source_format IS NOT NULL)"
    )


def downgrade() -> None:
    op.execute("UPDATE episodes SET seed = 0 WHERE seed IS NULL")
    _nullable(False)
