"""`steps.truncated` is NULL where nobody could tell whether the output was cut at the length
limit, where it read 0 ("not cut") for every step whose producer said nothing: `AVG(truncated)`
over a verl import read "no output cut" for files that never say.

Set NULL on upgrade: every step of a TRL, verl or chat-log import (their files do not say), of
an env-server run (its clients send text) and of a trainer's tool-environment run (a tool call
has no finish reason); the steps before the last of a SkyRL, rLLM, verifiers or Recorder
episode (those tell how the last turn ended only); and a Recorder episode's last step that
reads 0 (the Recorder took no `truncated=` before revision 0024's release, so its 0 is
"not told"). A fork's replayed step takes its source step's value, which the replay dropped.
rollscope's own runs keep theirs: their policies report how each output ended.

The steps table is rebuilt on SQLite (a NOT NULL column cannot be relaxed in place), and the
`step_prompts` view over it is made again. Downgrading writes 0 where NULL.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.prompts import prompt_view_sql

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | None = None
depends_on: str | None = None


def _nullable(nullable: bool) -> None:
    op.execute("DROP VIEW step_prompts")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.alter_column(
            "truncated",
            existing_type=sa.Boolean(),
            nullable=nullable,
            # No default: a row written without saying holds NULL, not "not cut".
            server_default=None if nullable else sa.false(),
        )
    op.execute(prompt_view_sql(op.get_bind().dialect.name))


def _of_runs(where: str) -> str:
    return (
        f"episode_id IN (SELECT e.id FROM episodes e JOIN runs r ON r.id = e.run_id WHERE {where})"
    )


def upgrade() -> None:
    _nullable(True)
    postgres = op.get_bind().dialect.name == "postgresql"
    policy_name = "r.policy_info->>'name'" if postgres else "json_extract(r.policy_info, '$.name')"
    untold = (
        "r.source_format IN ('trl', 'verl', 'messages')",
        "r.kind = 'env'",
        f"r.kind = 'training' AND {policy_name} = 'tools'",
    )
    for where in untold:
        op.execute(f"UPDATE steps SET truncated = NULL WHERE {_of_runs(where)}")
    last_turn_only = "r.source_format IN ('skyrl', 'rllm', 'verifiers', 'recorder')"
    op.execute(f"UPDATE steps SET truncated = NULL WHERE NOT done AND {_of_runs(last_turn_only)}")
    recorded = _of_runs("r.source_format = 'recorder'")
    op.execute(f"UPDATE steps SET truncated = NULL WHERE truncated = false AND {recorded}")
    op.execute(
        "UPDATE steps SET truncated = (SELECT src.truncated FROM episodes e "
        "JOIN steps src ON src.episode_id = e.forked_from AND src.step_no = steps.step_no "
        "WHERE e.id = steps.episode_id) WHERE replayed"
    )


def downgrade() -> None:
    op.execute("UPDATE steps SET truncated = false WHERE truncated IS NULL")
    _nullable(False)
