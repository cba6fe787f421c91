"""A run's `spec` holds only settings that were used, and an episode's `started_at` and
`ended_at` span its `duration_seconds`:

- an environment server's run (kind `env`) kept rollscope's generation settings, sample count
  and question selection (temperature 0, 64 new tokens), though its clients generate as they
  choose and ask for the questions they want: they are dropped, its `environment` kept;
- a spec that names no questions or databases (an import without `--questions`, a Recorder
  given none) held `""` for `dataset`, `questions_path` and `db_dir` where the run's `dataset`
  column is NULL (revision 0026): null now, as the column;
- episodes written before rollscope stamped them with the times they were played kept the times
  of the writes that carried them, so `ended_at` minus `started_at` read 0 for most episodes of
  a fast run. Their `started_at` becomes `ended_at` minus `duration_seconds` (the measured
  time); `ended_at` stays the finish's write, a moment after the end. Episodes whose times
  agree with their duration to the millisecond are left as they are.

The columns do not change; downgrading leaves the rows (a spec read back fills the settings it
lacks with the defaults it held, and `""` reads as a null name).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as `stored_spec` names them today.
_GENERATED_HERE_ONLY = ("generation", "samples", "limit", "question_ids")
_NAMED_DATA = ("dataset", "questions_path", "db_dir")
_TOLERANCE_S = 0.001
_CHUNK = 10_000

_RUNS = sa.table(
    "runs",
    sa.column("id", sa.Integer()),
    sa.column("kind", sa.String()),
    sa.column("spec", sa.JSON()),
)
_EPISODES = sa.table(
    "episodes",
    sa.column("id", sa.Integer()),
    sa.column("started_at", sa.DateTime()),
    sa.column("ended_at", sa.DateTime()),
    sa.column("duration_seconds", sa.Float()),
)


def upgrade() -> None:
    conn = op.get_bind()
    for run_id, kind, spec in conn.execute(sa.select(_RUNS.c.id, _RUNS.c.kind, _RUNS.c.spec)):
        if isinstance(spec, dict) and spec != (used := _used(kind, spec)):
            conn.execute(sa.update(_RUNS).where(_RUNS.c.id == run_id).values(spec=used))
    timed = sa.select(
        _EPISODES.c.id, _EPISODES.c.started_at, _EPISODES.c.ended_at, _EPISODES.c.duration_seconds
    ).where(
        _EPISODES.c.started_at.is_not(None),
        _EPISODES.c.ended_at.is_not(None),
        _EPISODES.c.duration_seconds.is_not(None),
    )
    starts = [
        {"episode": episode_id, "start": ended - timedelta(seconds=duration)}
        for episode_id, started, ended, duration in conn.execute(timed)
        if abs((ended - started).total_seconds() - duration) > _TOLERANCE_S
    ]
    set_start = (
        sa.update(_EPISODES)
        .where(_EPISODES.c.id == sa.bindparam("episode"))
        .values(started_at=sa.bindparam("start"))
    )
    for at in range(0, len(starts), _CHUNK):
        conn.execute(set_start, starts[at : at + _CHUNK])


def _used(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    dropped = _GENERATED_HERE_ONLY if kind == "env" else ()
    used = {k: v for k, v in spec.items() if k not in dropped}
    for key in _NAMED_DATA:
        if used.get(key) == "":
            used[key] = None
    return used


def downgrade() -> None:
    pass
