"""Initial schema: runs, episodes, steps, run tags.

Revision ID: 0001
Revises: (none)
Create Date: 2026-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("checkpoint_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("dataset", sa.Text(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("episodes_planned", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("host", sa.Text(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'interrupted')",
            name=op.f("ck_runs_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("name", name=op.f("uq_runs_name")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_runs_created_at_id"), ["created_at", "id"], unique=False
        )

    op.create_table(
        "episodes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.String(length=200), nullable=False),
        sa.Column("sample_index", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("db_id", sa.String(length=200), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("gold_sql", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("operational", sa.Float(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("unparsed_steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("has_unparsed", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("has_sql_error", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("describe_steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("sample_steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("query_steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("answer_steps", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('correct', 'wrong', 'budget_exhausted', 'error')",
            name=op.f("ck_episodes_outcome"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_episodes_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
    )
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_episodes_db_id"), ["db_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_episodes_question_id"), ["question_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_episodes_run_id_duration_seconds_id"),
            ["run_id", "duration_seconds", "id"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_episodes_run_id_id"), ["run_id", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_episodes_run_outcome_metrics"),
            [
                "run_id",
                "outcome",
                "reward",
                "steps",
                "unparsed_steps",
                "describe_steps",
                "sample_steps",
                "query_steps",
                "answer_steps",
            ],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_episodes_run_id_question_id_sample_index"),
            ["run_id", "question_id", "sample_index"],
            unique=True,
        )
        batch_op.create_index(
            batch_op.f("ix_episodes_run_id_reward_id"), ["run_id", "reward", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_episodes_run_id_steps_id"), ["run_id", "steps", "id"], unique=False
        )

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

    op.create_table(
        "steps",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "episode_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("step_no", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("raw_output", sa.Text(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("argument", sa.Text(), nullable=False),
        sa.Column("parsed", sa.Boolean(), nullable=False),
        sa.Column("observation", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("tokens_in", sa.Integer(), nullable=True),
        sa.Column("tokens_out", sa.Integer(), nullable=True),
        sa.Column("policy_seconds", sa.Float(), nullable=False),
        sa.Column("env_seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_steps_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steps")),
    )
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_steps_episode_id_step_no"), ["episode_id", "step_no"], unique=True
        )


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_steps_episode_id_step_no"))

    op.drop_table("steps")
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tags_name_value"))

    op.drop_table("run_tags")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episodes_run_id_steps_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_id_reward_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_id_question_id_sample_index"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_outcome_metrics"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_id_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_run_id_duration_seconds_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_question_id"))
        batch_op.drop_index(batch_op.f("ix_episodes_db_id"))

    op.drop_table("episodes")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_created_at_id"))

    op.drop_table("runs")
