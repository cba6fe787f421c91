"""Typed run specs, policy info apart, run kinds; per-step token traces.

- runs.kind (batch / training / fork) and runs.policy_info (what the policy reported about
  itself, once merged into the spec's generation settings);
- every stored spec rewritten to the typed layout (`generation` and `environment` as the
  settings dataclasses hold them, `batch_size` and `seed` inside `generation`), with what the
  policy had reported moved out to policy_info;
- steps.truncated, cached_tokens, token_trace, mean_logprob, mean_entropy.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

# The layout as of this revision, frozen here so later code changes cannot alter the migration.
_GENERATION_KEYS = (
    "temperature", "top_p", "max_new_tokens", "seed", "batch_size", "device", "dtype", "threads"
)  # fmt: skip
_REPORTED_KEYS = ("policy", "checkpoint")
_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=16), server_default="batch", nullable=False)
        )
        batch_op.add_column(sa.Column("policy_info", sa.JSON(), nullable=True))
        batch_op.create_check_constraint("kind", "kind IN ('batch', 'training', 'fork')")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("truncated", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("cached_tokens", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("token_trace", sa.LargeBinary(), nullable=True))
        batch_op.add_column(sa.Column("mean_logprob", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("mean_entropy", sa.Float(), nullable=True))
    _rewrite_specs()


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        for column in ("mean_entropy", "mean_logprob", "token_trace", "cached_tokens", "truncated"):
            batch_op.drop_column(column)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint("ck_runs_kind", type_="check")
        batch_op.drop_column("policy_info")
        batch_op.drop_column("kind")


def _rewrite_specs() -> None:
    runs = sa.table(
        "runs",
        sa.column("id", sa.Integer),
        sa.column("spec", sa.JSON),
        sa.column("policy_info", sa.JSON),
    )
    conn = op.get_bind()
    for run_id, spec in conn.execute(sa.select(runs.c.id, runs.c.spec)).all():
        if not isinstance(spec, dict):
            continue  # left as it is: the reader refuses it in one line
        new_spec, reported = typed_layout(spec)
        conn.execute(
            runs.update()
            .where(runs.c.id == run_id)
            .values(spec=new_spec, policy_info=reported or None)
        )


def typed_layout(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the spec in the typed layout, what the policy had reported about itself)."""
    generation = dict(spec.get("generation") or {})
    reported: dict[str, Any] = {}
    for key in _REPORTED_KEYS:
        if key in generation:
            reported[key] = generation.pop(key)
    if "dtype" in generation and generation["dtype"] in _DTYPE_NAMES:
        reported["dtype"] = generation["dtype"]  # the dtype chosen, not asked for
        generation["dtype"] = _DTYPE_NAMES[generation["dtype"]]
    for key in ("batch_size", "seed"):
        if key in spec and key not in generation:
            generation[key] = spec[key]
    generation = {k: v for k, v in generation.items() if k in _GENERATION_KEYS and v is not None}
    out = {k: v for k, v in spec.items() if k not in ("batch_size", "seed")}
    out["generation"] = generation
    out["environment"] = dict(spec.get("environment") or {})
    if out.get("checkpoint_fingerprint") is not None:
        reported["fingerprint"] = out["checkpoint_fingerprint"]
    out.pop("checkpoint_fingerprint", None)
    out.setdefault("kind", "batch")
    if reported:
        reported.setdefault("name", str(spec.get("policy", "")).partition(":")[0] or "unknown")
    return out, reported
