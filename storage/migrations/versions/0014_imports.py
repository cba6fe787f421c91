"""What importing other frameworks' rollout files needs: where a run's episodes come from
(`runs.source_format`, `source_path`, `skipped_lines`), the files an import read
(`import_files`, found again by path and SHA-256), the row each imported episode was read from with
rollscope's own re-grade (`episode_sources`), and every episode's rewards by name
(`episode_rewards`). New tables and nullable (or defaulted) columns: no row is rewritten.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as the constraint is.
_REGRADES = ("correct", "wrong", "error")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_format", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("source_path", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("skipped_lines", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    op.create_table(
        "import_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.LargeBinary(length=32), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("episodes", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("skipped_lines", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_import_files_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_import_files")),
        sa.UniqueConstraint(
            "run_id", "path", "sha256", name=op.f("uq_import_files_run_id_path_sha256")
        ),
    )
    op.create_table(
        "episode_sources",
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.LargeBinary(length=32), nullable=False),
        sa.Column("regraded", sa.String(length=16), nullable=True),
        sa.Column("filled_steps", sa.Text(), nullable=True),
        sa.CheckConstraint(
            f"regraded IN ({', '.join(repr(v) for v in _REGRADES)})",
            name=op.f("ck_episode_sources_regraded"),
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_episode_sources_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["file_id"],
            ["import_files.id"],
            name=op.f("fk_episode_sources_file_id_import_files"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("episode_id", name=op.f("pk_episode_sources")),
    )
    op.create_index(op.f("ix_episode_sources_file_id_line"), "episode_sources", ["file_id", "line"])
    op.create_table(
        "episode_rewards",
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
            name=op.f("fk_episode_rewards_episode_id_episodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("episode_id", "name", name=op.f("pk_episode_rewards")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("episode_rewards")
    op.drop_index(op.f("ix_episode_sources_file_id_line"), table_name=op.f("episode_sources"))
    op.drop_table("episode_sources")
    op.drop_table("import_files")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("skipped_lines")
        batch_op.drop_column("source_path")
        batch_op.drop_column("source_format")
