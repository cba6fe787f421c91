"""A run whose policy reported nothing (an import, a Recorder's run) holds SQL NULL in
`runs.policy_info`, where it held the JSON text `null`: `WHERE policy_info IS NULL` found none
of them. The model now writes NULL (`JSON(none_as_null=True)`); this revision rewrites the rows
written before. Downgrading leaves them NULL, which every reader takes as nothing reported.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # PostgreSQL's json type compares as text; SQLite holds the JSON as text already.
    held = "policy_info::text" if op.get_bind().dialect.name == "postgresql" else "policy_info"
    op.execute(f"UPDATE runs SET policy_info = NULL WHERE {held} = 'null'")


def downgrade() -> None:
    pass
