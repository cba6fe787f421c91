"""A step's argument and error as spans of its raw output and observation.

The argument is text the parser took from the raw output, and an error is what the observation
shows after `Error: `; each was stored again in its own column (86 and 33 bytes a step on the
demo store). Both are now two character offsets into their source when the source holds them
(`storage.step_spans`), and the text column holds ''.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# Texts shorter than this stayed whole (a span costs two integers).
MIN_SPAN = 4

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

# (text column, the column that holds it); both SQL dialects count characters from 1.
_SPANS = (("argument", "raw_output"), ("error", "observation"))


def upgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        for name, _ in _SPANS:
            batch_op.add_column(sa.Column(f"{name}_start", sa.Integer(), nullable=True))
            batch_op.add_column(sa.Column(f"{name}_end", sa.Integer(), nullable=True))
    find = "strpos" if op.get_bind().dialect.name == "postgresql" else "instr"
    for name, source in _SPANS:
        # One pass a column; SET reads the row as it was, so `name` is still the text.
        op.execute(
            f"UPDATE steps SET {name}_start = {find}({source}, {name}) - 1, "
            f"{name}_end = {find}({source}, {name}) - 1 + length({name}), {name} = '' "
            f"WHERE {name} IS NOT NULL AND length({name}) >= {MIN_SPAN} "
            f"AND {find}({source}, {name}) > 0"
        )


def downgrade() -> None:
    for name, source in _SPANS:
        op.execute(
            f"UPDATE steps SET {name} = substr({source}, {name}_start + 1, "
            f"{name}_end - {name}_start) WHERE {name}_end IS NOT NULL"
        )
    with op.batch_alter_table("steps", schema=None) as batch_op:
        for name, _ in reversed(_SPANS):
            batch_op.drop_column(f"{name}_end")
            batch_op.drop_column(f"{name}_start")
