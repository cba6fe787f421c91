"""Training runs: each episode's training step and GRPO group, and its token statistics.

- episodes.train_step, group_index (NULL outside training runs);
- episodes.mean_logprob, tokens_out: the episode's model tokens, so the Training page's
  per-step curves never read the steps table;
- one covering index for those curves.

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_INDEX = "ix_episodes_run_train_step_metrics"
_INDEX_COLUMNS = [
    "run_id",
    "train_step",
    "group_index",
    "outcome",
    "reward",
    "steps",
    "unparsed_steps",
    "mean_logprob",
    "tokens_out",
]


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("train_step", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("group_index", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mean_logprob", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("tokens_out", sa.Integer(), nullable=True))
    op.create_index(_INDEX, "episodes", _INDEX_COLUMNS, unique=False)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="episodes")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        for column in ("tokens_out", "mean_logprob", "group_index", "train_step"):
            batch_op.drop_column(column)
