"""An imported or Recorder step whose text carried no action has no `action` and no
`argument`: NULL, where they read QUERY and the whole text as if rollscope's environment had run
it (as it runs an output without an action line). Nothing ran it here; its framework's own
environment answered it, so `GROUP BY action` counted QUERYs that never happened.

A step without an action repeats none, so an imported episode that a repeated text made a
repeated-action loop is classed again (and its run's counts with it). The steps table is rebuilt
on SQLite (a NOT NULL column cannot be relaxed in place), and the `step_prompts` view over it is
made again. Downgrading writes QUERY and the trimmed text back, and keeps the classes.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.prompts import prompt_view_sql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | None = None
depends_on: str | None = None

_PLAYED_ELSEWHERE = (
    "episode_id IN (SELECT e.id FROM episodes e JOIN runs r ON r.id = e.run_id "
    "WHERE r.source_format IS NOT NULL)"
)


def _nullable(nullable: bool) -> None:
    op.execute("DROP VIEW step_prompts")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.alter_column("action", existing_type=sa.String(16), nullable=nullable)
        batch_op.alter_column("argument", existing_type=sa.Text(), nullable=nullable)
    op.execute(prompt_view_sql(op.get_bind().dialect.name))


def upgrade() -> None:
    _nullable(True)
    op.execute(
        f"UPDATE steps SET action = NULL, argument = NULL WHERE NOT parsed AND {_PLAYED_ELSEWHERE}"
    )
    _reclassify_loops()


def _reclassify_loops() -> None:
    """Imported loops with two or more steps that took no action, classed by today's rule."""
    # As the write path classes and counts (both read only columns this revision has).
    from storage.classify import Finished, classify_stored
    from storage.run_totals import recompute

    conn = op.get_bind()
    loops = conn.execute(
        sa.text(
            "SELECT e.id, e.run_id, e.outcome, e.progress FROM episodes e "
            "JOIN runs r ON r.id = e.run_id WHERE r.source_format IS NOT NULL "
            "AND e.failure_class = 'action_loop' AND e.unparsed_steps >= 2"
        )
    ).all()
    classes = classify_stored(conn, [Finished(e.id, e.outcome, e.progress) for e in loops])
    runs = set()
    for e in loops:
        if classes[e.id] != "action_loop":
            conn.execute(
                sa.text("UPDATE episodes SET failure_class = :c WHERE id = :id"),
                {"c": classes[e.id], "id": e.id},
            )
            runs.add(e.run_id)
    if runs:
        recompute(conn, sorted(runs))


def downgrade() -> None:
    # What the parser gave such a text: QUERY with the text stripped of whitespace.
    blanks = "' ' || char(9) || char(10) || char(13)"
    trimmed = (
        f"trim(raw_output, {blanks})"
        if op.get_bind().dialect.name == "sqlite"
        else "btrim(raw_output, E' \\t\\n\\r')"
    )
    op.execute(f"UPDATE steps SET action = 'QUERY', argument = {trimmed} WHERE action IS NULL")
    _nullable(False)
