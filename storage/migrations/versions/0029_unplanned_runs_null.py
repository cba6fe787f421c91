"""`runs.episodes_planned` is NULL where a run sets out to play no number of episodes, where it
held 0 (an env server's run, a trainer's tools: the episodes come as long as clients or the
trainer play) or the count a Recorder had written so far. "0 planned" beside 500 played read
false to plain SQL, and a rate over it divided by zero (an error on PostgreSQL).

Set NULL on upgrade: runs of kind `env`, a trainer's tool-environment runs (`policy_info`'s
name `tools`) and a Recorder's runs. A batch, a fork, a recorded TRL run and an import keep
theirs: what they were asked to play, and an import's rows of the files it has begun.

The runs table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place); its ids
stay, and with them everything that points at them. Downgrading writes back what each held:
a Recorder's run its finished episodes, the others 0.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | None = None
depends_on: str | None = None


def _nullable(nullable: bool) -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("episodes_planned", existing_type=sa.Integer(), nullable=nullable)


def upgrade() -> None:
    _nullable(True)
    postgres = op.get_bind().dialect.name == "postgresql"
    policy_name = "policy_info->>'name'" if postgres else "json_extract(policy_info, '$.name')"
    op.execute(
        "UPDATE runs SET episodes_planned = NULL WHERE kind = 'env' "
        f"OR source_format = 'recorder' OR (kind = 'training' AND {policy_name} = 'tools')"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE runs SET episodes_planned = CASE WHEN source_format = 'recorder' "
        "THEN finished_episodes ELSE 0 END WHERE episodes_planned IS NULL"
    )
    _nullable(False)
