"""An imported episode's source row names its agent: a verifiers v1 line holds a trace per
agent, and each trained agent's trace is an episode of that line.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("episode_sources", sa.Column("agent", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episode_sources", schema=None) as batch_op:
        batch_op.drop_column("agent")
