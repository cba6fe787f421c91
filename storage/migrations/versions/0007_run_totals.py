"""Run totals: each run's finished and correct episodes, reward and step sums on its row.

The Runs list grouped every episode of the listed runs on each read (2.3 s at a million
episodes); the write path now keeps these totals (`storage.run_totals`) and the list reads one
row per run. They are back-filled by 0008, in the same pass as the run counts it adds.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_INTEGERS = (
    "finished_episodes",
    "correct_episodes",
    "error_episodes",
    "finished_step_sum",
    "step_sum",
    "unparsed_sum",
)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name in _INTEGERS:
            batch_op.add_column(
                sa.Column(name, sa.Integer(), server_default=sa.text("0"), nullable=False)
            )
        batch_op.add_column(
            sa.Column("reward_sum", sa.Float(), server_default=sa.text("0"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name in ("reward_sum", *reversed(_INTEGERS)):
            batch_op.drop_column(name)
