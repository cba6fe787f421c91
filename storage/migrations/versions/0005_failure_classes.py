"""Failure classes: episodes.failure_class, back-filled for every finished episode; indexes for
the class mix, GRPO groups and the question map.

The back-fill classifies with the classifier new episodes get (`storage.classify`, which reads
the steps only of episodes that ended without an answer), a chunk of episodes at a time in id
order, so a store of 100k episodes upgrades in seconds and memory stays flat.

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from alembic import op

from rollout_core.records import Outcome

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

# The classes as of this revision, frozen here like the constraint they feed.
_CLASSES = (
    "correct", "wrong_after_gold", "wrong_answer", "sql_errors", "unparsed", "action_loop",
    "budget_exhausted", "env_error",
)  # fmt: skip
_CHUNK = 2000


def upgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failure_class", sa.String(length=32), nullable=True))
        batch_op.create_check_constraint(
            "failure_class", f"failure_class IN ({', '.join(repr(c) for c in _CLASSES)})"
        )
        batch_op.create_index(
            "ix_episodes_run_id_failure_class_id", ["run_id", "failure_class", "id"], unique=False
        )
        batch_op.create_index(
            "ix_episodes_run_question_results",
            ["run_id", "question_id", "outcome", "reward"],
            unique=False,
        )
    backfill(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_index("ix_episodes_run_question_results")
        batch_op.drop_index("ix_episodes_run_id_failure_class_id")
        batch_op.drop_constraint("failure_class", type_="check")
        batch_op.drop_column("failure_class")


def backfill(conn: sa.Connection) -> int:
    """Classify every finished episode that has no class yet; returns how many."""
    from storage.classify import Finished, classify_stored

    episodes = sa.table(
        "episodes",
        sa.column("id", sa.Integer),
        sa.column("outcome", sa.String),
        sa.column("progress", sa.Float),
        sa.column("failure_class", sa.String),
    )
    set_class = (
        episodes.update()
        .where(episodes.c.id == sa.bindparam("b_id"))
        .values(failure_class=sa.bindparam("b_class"))
    )
    last, done = 0, 0
    while True:
        rows = conn.execute(
            sa.select(episodes.c.id, episodes.c.outcome, episodes.c.progress)
            .where(
                episodes.c.id > last,
                episodes.c.outcome.is_not(None),
                episodes.c.failure_class.is_(None),
            )
            .order_by(episodes.c.id)
            .limit(_CHUNK)
        ).all()
        if not rows:
            return done
        finished = [Finished(i, cast(Outcome, o), p) for i, o, p in rows]
        classes = classify_stored(conn, finished)
        params: list[dict[str, Any]] = [{"b_id": i, "b_class": c} for i, c in classes.items()]
        conn.execute(set_class, params)
        done += len(rows)
        last = rows[-1][0]
