"""Run counts: each run's steps per action, and its finished episodes per outcome, failure
class, length and reward, kept by the write path for the Runs page's charts; then the totals of
0007 and these counts back-filled from the episodes (`storage.run_totals.recompute`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "run_counts",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_counts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "kind", "key", name=op.f("pk_run_counts")),
    )
    # As the write path keeps them (reads only episode columns every revision has had).
    from storage.run_totals import recompute

    recompute(op.get_bind())


def downgrade() -> None:
    op.drop_table("run_counts")
