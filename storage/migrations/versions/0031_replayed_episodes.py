"""The episodes of a trainer's run whose training steps a trainer resumed from a checkpoint
played again (`replayed_episodes`): the Training page, GRPO groups and step sides read a step
as its latest play, as they read an import's rewritten step file.

Runs resumed before this revision keep both plays unmarked (which of their episodes a resumed
trainer replaced is not in the store).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | None = None
depends_on: str | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "replayed_episodes",
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("resumed_at_step", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_replayed_episodes_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_replayed_episodes_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("episode_id", name=op.f("pk_replayed_episodes")),
    )
    op.create_index(op.f("ix_replayed_episodes_run_id"), "replayed_episodes", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_replayed_episodes_run_id"), table_name="replayed_episodes")
    op.drop_table("replayed_episodes")
