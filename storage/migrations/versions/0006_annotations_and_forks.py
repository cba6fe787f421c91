"""Annotations replace run tags; forked episodes and replayed steps.

- `annotations`: a tag and a note on a run, an episode or a step, with who wrote it and when.
  The rows of `run_tags` (name/value labels on a run) move there as run labels (no episode,
  the name as the tag, the value as the note), and `run_tags` goes.
- episodes.forked_from, fork_step: a fork's episode names the recorded episode it continues
  and the first step its own policy played;
- steps.replayed: the steps a fork re-executed from its source.

Revision ID: 0006
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "annotations",
        sa.Column("id", _ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("episode_id", _ID, nullable=True),
        sa.Column("step_no", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tag", sa.String(length=200), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("author", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_annotations_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_annotations_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotations")),
    )
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_annotations_episode_id_step_no_tag"),
            ["episode_id", "step_no", "tag"],
            unique=True,
        )
        batch_op.create_index(batch_op.f("ix_annotations_run_id_tag"), ["run_id", "tag"])
        batch_op.create_index(
            batch_op.f("ix_annotations_tag_run_id_episode_id"), ["tag", "run_id", "episode_id"]
        )
    _move_run_tags()
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tags_name_value"))
    op.drop_table("run_tags")

    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("forked_from", _ID, nullable=True))
        batch_op.add_column(sa.Column("fork_step", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_episodes_forked_from"), ["forked_from"])
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("replayed", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("replayed")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episodes_forked_from"))
        batch_op.drop_column("fork_step")
        batch_op.drop_column("forked_from")

    op.create_table(
        "run_tags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_tags_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_tags")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_run_tags_run_id_name")),
    )
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tags_name_value"), ["name", "value"], unique=False)
    # Run labels go back; episode and step annotations have no place in the older schema.
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(_annotations.c.run_id, _annotations.c.tag, _annotations.c.note)
        .where(_annotations.c.episode_id.is_(None))
        .order_by(_annotations.c.id)
    ).all()
    latest = {(run_id, tag): note or "" for run_id, tag, note in rows}
    if latest:
        conn.execute(
            sa.insert(_run_tags),
            [{"run_id": r, "name": t, "value": v} for (r, t), v in latest.items()],
        )
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_annotations_tag_run_id_episode_id"))
        batch_op.drop_index(batch_op.f("ix_annotations_run_id_tag"))
        batch_op.drop_index(batch_op.f("ix_annotations_episode_id_step_no_tag"))
    op.drop_table("annotations")


# The tables as of this revision, frozen here so later model changes cannot alter the migration.
_run_tags = sa.table(
    "run_tags",
    sa.column("run_id", sa.Integer),
    sa.column("name", sa.String),
    sa.column("value", sa.Text),
)
_annotations = sa.table(
    "annotations",
    sa.column("id", sa.Integer),
    sa.column("run_id", sa.Integer),
    sa.column("episode_id", sa.Integer),
    sa.column("step_no", sa.Integer),
    sa.column("tag", sa.String),
    sa.column("note", sa.Text),
    sa.column("author", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
)


def _move_run_tags() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_run_tags.c.run_id, _run_tags.c.name, _run_tags.c.value)).all()
    if not rows:
        return
    # SQLite keeps naive UTC text (storage.models.UtcDateTime); PostgreSQL an aware time.
    now = datetime.now(UTC)
    stamp = now.replace(tzinfo=None) if conn.dialect.name == "sqlite" else now
    conn.execute(
        sa.insert(_annotations),
        [
            {"run_id": r, "episode_id": None, "step_no": 0, "tag": n, "note": v}
            | {"author": None, "created_at": stamp}
            for r, n, v in rows
        ],
    )
