"""A step's `policy_seconds` and `env_seconds` are NULL where rollscope did not measure them:
an imported rollout's (generated and played elsewhere), and an env-server step's generation
(its client generated it). They held 0.0, which read as "took no time" to anyone averaging them.

The steps table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place), and the
`step_prompts` view over it is made again. Downgrading writes 0.0 back.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.prompts import prompt_view_sql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None

_TIMINGS = ("policy_seconds", "env_seconds")


def _of_runs(kind: str) -> str:
    return (
        "episode_id IN (SELECT e.id FROM episodes e JOIN runs r ON r.id = e.run_id "
        f"WHERE r.kind = '{kind}')"
    )


def _nullable(nullable: bool) -> None:
    op.execute("DROP VIEW step_prompts")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        for column in _TIMINGS:
            batch_op.alter_column(column, existing_type=sa.Float(), nullable=nullable)
    op.execute(prompt_view_sql(op.get_bind().dialect.name))


def upgrade() -> None:
    _nullable(True)
    unmeasured = {
        "import": "policy_seconds = NULL, env_seconds = NULL",
        "env": "policy_seconds = NULL",
    }
    for kind, columns in unmeasured.items():
        op.execute(f"UPDATE steps SET {columns} WHERE {_of_runs(kind)}")


def downgrade() -> None:
    for column in _TIMINGS:
        op.execute(f"UPDATE steps SET {column} = 0.0 WHERE {column} IS NULL")
    _nullable(False)
