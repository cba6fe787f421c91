"""An episode keeps the advantage its trainer gave it, where the trainer reports one (TRL's
completions files hold an `advantage` column, which imports left out).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("episodes", sa.Column("trainer_advantage", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("trainer_advantage")
