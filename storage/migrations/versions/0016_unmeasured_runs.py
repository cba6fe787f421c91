"""An episode's `duration_seconds`, `progress` and `operational` are NULL where nobody measured
them. They held 0.0, which read as "took no time" and "made no progress" to anyone averaging
them:

- `duration_seconds` of an imported or Recorder rollout (the files and the loop give no time)
  and of an env-server episode a killed server left open (ended `abandoned` by the next);
- `progress` and `operational`, rollscope's environment signals, of a Recorder rollout and of
  an import without `--questions` (its runs name no dataset). An import with `--questions`
  played again each episode whose question it found; the 0.0 of one it did not find cannot be
  told apart from a measured one, and stays.

The columns were nullable already (an unfinished episode's are NULL): only rows change.
Downgrading writes 0.0 back into the finished episodes' NULLs.

Likewise the `spec` of such a run (an import's, a Recorder's) loses the settings of how
rollscope plays a run (generation, environment, samples, limit, question ids): it held
rollscope's defaults (temperature 0, a step budget of 10) for rollouts a trainer generated
with its own. A spec read back fills them with those defaults, so downgrading leaves it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None

_NOT_TIMED = (
    "run_id IN (SELECT id FROM runs WHERE source_format IS NOT NULL) "
    "OR (outcome = 'abandoned' AND duration_seconds = 0.0 "
    "AND run_id IN (SELECT id FROM runs WHERE kind = 'env'))"
)
_NOT_PLAYED = (
    "run_id IN (SELECT id FROM runs WHERE source_format = 'recorder' "
    "OR (kind = 'import' AND dataset = ''))"
)
_COLUMNS = ("duration_seconds", "progress", "operational")
# Frozen here, as `stored_spec.PLAYED_ONLY` is today.
_PLAYED_ONLY = ("generation", "environment", "samples", "limit", "question_ids")
_RUNS = sa.table(
    "runs",
    sa.column("id", sa.Integer()),
    sa.column("spec", sa.JSON()),
    sa.column("source_format", sa.String()),
)


def upgrade() -> None:
    op.execute(f"UPDATE episodes SET duration_seconds = NULL WHERE {_NOT_TIMED}")
    op.execute(f"UPDATE episodes SET progress = NULL, operational = NULL WHERE {_NOT_PLAYED}")
    conn = op.get_bind()
    elsewhere = sa.select(_RUNS.c.id, _RUNS.c.spec).where(_RUNS.c.source_format.is_not(None))
    for run_id, spec in conn.execute(elsewhere).all():
        if isinstance(spec, dict):
            kept: dict[str, Any] = {k: v for k, v in spec.items() if k not in _PLAYED_ONLY}
            conn.execute(sa.update(_RUNS).where(_RUNS.c.id == run_id).values(spec=kept))


def downgrade() -> None:
    for column in _COLUMNS:
        op.execute(
            f"UPDATE episodes SET {column} = 0.0 WHERE {column} IS NULL AND outcome IS NOT NULL"
        )
