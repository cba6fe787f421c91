"""`steps.observation` is NULL where nothing answered the step, where it read `''`: after the
last turn of an imported or Recorder rollout nobody replied, and `''` said "the environment
replied with nothing" (an empty tool result, which a file can hold too). Now `observation IS
NULL` finds the turns nothing answered, and `''` is a reply that was empty.

Set NULL on upgrade: the last step of an episode of a run rollscope did not play (an import or
a Recorder's: `runs.source_format` set) whose observation reads `''`. Earlier steps' `''` are
left as written: before this revision an empty reply and none were stored alike, and only
after the last turn is "none" the rule (a file's turn before the last has its reply after it).
rollscope's own environment answers every step, an ANSWER with its verdict.

The steps table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place), and the
`step_prompts` view over it is made again. Downgrading writes `''` where NULL.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.prompts import prompt_view_sql

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | None = None
depends_on: str | None = None


def _nullable(nullable: bool) -> None:
    op.execute("DROP VIEW step_prompts")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.alter_column("observation", existing_type=sa.Text(), nullable=nullable)
    op.execute(prompt_view_sql(op.get_bind().dialect.name))


def upgrade() -> None:
    _nullable(True)
    op.execute(
        "UPDATE steps SET observation = NULL WHERE observation = '' AND done AND episode_id IN "
        "(SELECT e.id FROM episodes e JOIN runs r ON r.id = e.run_id "
        "WHERE r.source_format IS NOT NULL)"
    )


def downgrade() -> None:
    op.execute("UPDATE steps SET observation = '' WHERE observation IS NULL")
    _nullable(False)
