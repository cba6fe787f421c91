"""The training index holds each episode's trainer advantage: a training run's GRPO groups and
its Training curves count a group as learning signal by the advantages the trainer gave, where
it reported them, and still read that index alone.

A recorded TRL run's trainer can train on another reward than the episode's (correctness
alone, where rollscope's environment adds shaping): its groups were judged by the episode's
reward spread, which counted groups the trainer gave no advantage as shaping signal.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | None = None
depends_on: str | None = None

_INDEX = "ix_episodes_run_train_step_metrics"
_COLUMNS = [
    "run_id",
    "train_step",
    "group_index",
    "question_id",
    "outcome",
    "reward",
    "steps",
    "unparsed_steps",
    "mean_logprob",
    "tokens_out",
]


def upgrade() -> None:
    op.drop_index(_INDEX, table_name="episodes")
    op.create_index(_INDEX, "episodes", [*_COLUMNS, "trainer_advantage"], unique=False)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="episodes")
    op.create_index(_INDEX, "episodes", _COLUMNS, unique=False)
