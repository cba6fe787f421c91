"""Runs of two new kinds, `import` (files another framework wrote) and `env` (the environment
server's sessions), and the outcome and failure class `abandoned` (a player that left an
episode before it ended): the CHECK constraints widened to take them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

# The values as of this revision and the one before, frozen here like the constraints.
_KINDS = ("batch", "training", "fork")
_OUTCOMES = ("correct", "wrong", "budget_exhausted", "error")
_CLASSES = (
    "correct", "wrong_after_gold", "wrong_answer", "sql_errors", "unparsed", "action_loop",
    "budget_exhausted", "env_error",
)  # fmt: skip
_NEW_KINDS = ("import", "env")
_ABANDONED = ("abandoned",)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _constraints(
    kinds: tuple[str, ...], outcomes: tuple[str, ...], classes: tuple[str, ...]
) -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint("kind", type_="check")
        batch_op.create_check_constraint("kind", _in("kind", kinds))
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_constraint("outcome", type_="check")
        batch_op.drop_constraint("failure_class", type_="check")
        batch_op.create_check_constraint("outcome", _in("outcome", outcomes))
        batch_op.create_check_constraint("failure_class", _in("failure_class", classes))


def upgrade() -> None:
    _constraints(_KINDS + _NEW_KINDS, _OUTCOMES + _ABANDONED, _CLASSES + _ABANDONED)


def downgrade() -> None:
    op.execute(f"DELETE FROM runs WHERE kind IN {_NEW_KINDS!r}")
    op.execute("DELETE FROM episodes WHERE outcome = 'abandoned'")
    _constraints(_KINDS, _OUTCOMES, _CLASSES)
