"""Each run's totals (on its `runs` row) and counts (`run_counts`), kept by the write path, so
the Runs list and its charts read a few rows per run instead of grouping the run's episodes.

At a million episodes the GROUP BYs over them took 2.3 s a read; keeping the numbers costs one
UPDATE of the run's row and one upsert of a few count rows per written batch. Every write that
changes what they count goes through a `RunChange`: steps counted, episodes finished (or
finished again) and unfinished episodes deleted. `recompute` rebuilds them from the episodes
(the migration, bulk fills).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from rollout_core.records import ACTION_KINDS
from storage.bulk_sql import executemany
from storage.float_sums import saturating_add
from storage.models import Episode, Run, RunCount

_RUNS = cast(Table, Run.__table__)
_COUNTS = cast(Table, RunCount.__table__)

UNPARSED = "UNPARSED"
"""The `action` count of steps with no action line."""
COLUMNS = (
    "finished_episodes",
    "correct_episodes",
    "error_episodes",
    "reward_sum",
    "finished_step_sum",
    "step_sum",
    "unparsed_sum",
)
"""The totals on a run's row: finished, correct and errored episodes; the reward and step sums
of the finished ones; the steps, and the unparsed ones, of all the run's episodes."""

# What an episode counts for in its run's numbers (and deleting it takes out), in the order
# `RunChange.episodes` reads.
COUNTED_COLUMNS = (
    Episode.outcome,
    Episode.failure_class,
    Episode.reward,
    Episode.steps,
    Episode.unparsed_steps,
    *(getattr(Episode, f"{a.lower()}_steps") for a in ACTION_KINDS),
)


REWARD_KEY_BOUND = 10**63 - 1
"""The largest count key in thousandths, a minus sign and 63 digits filling the key column's
64 characters: a reward past about 1e60 (a file's nonsense) is counted at the bound, where a
longer key failed the write on PostgreSQL. The episode's own reward column keeps it whole."""


def reward_key(reward: float) -> int:
    """The reward in thousandths: the `reward` count's key."""
    scaled = reward * 1000
    # Past 1.8e305 thousandths overflow a float; whole units are as exact there.
    key = round(scaled) if math.isfinite(scaled) else round(reward) * 1000
    return max(-REWARD_KEY_BOUND, min(REWARD_KEY_BOUND, key))


class RunChange:
    """What one transaction adds to a run's totals and counts (negative for what it removes)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = dict.fromkeys(COLUMNS, 0)
        self.counts: Counter[tuple[str, str]] = Counter()

    def steps(self, by_action: Mapping[str, int]) -> None:
        """Steps written, by action (`UNPARSED` for those with none)."""
        self.totals["step_sum"] += sum(by_action.values())
        self.totals["unparsed_sum"] += by_action.get(UNPARSED, 0)
        for action, n in by_action.items():
            if n:
                self.counts["action", action] += n

    def finished(
        self, outcome: str, failure_class: str | None, reward: float, steps: int, weight: int = 1
    ) -> None:
        """`weight` episodes finished alike (-1: an earlier finish of one taken back)."""
        t = self.totals
        t["finished_episodes"] += weight
        t["correct_episodes"] += weight * (outcome == "correct")
        t["error_episodes"] += weight * (outcome == "error")
        t["reward_sum"] += weight * reward
        t["finished_step_sum"] += weight * steps
        self.counts["outcome", outcome] += weight
        if failure_class is not None:
            self.counts["class", failure_class] += weight
        self.counts["steps", str(steps)] += weight
        self.counts["reward", str(reward_key(reward))] += weight

    def finishing(
        self, conn: Connection, finishes: Sequence[tuple[int, str, str | None, float]]
    ) -> None:
        """(episode id, outcome, failure class, reward) about to be written: their outcomes in,
        and an earlier outcome of the same episode, if one was recorded, out. Call it after
        the batch's steps are counted and before the finishes are written."""
        by_id = {f[0]: f for f in finishes}
        # Driver SQL: once per written batch, SQLAlchemy's statement handling cost more than
        # the primary-key lookups.
        marks = ", ".join("?" if conn.dialect.paramstyle == "qmark" else "%s" for _ in by_id)
        rows = conn.exec_driver_sql(
            f"SELECT id, outcome, failure_class, reward, steps FROM episodes WHERE id IN ({marks})",
            tuple(by_id),
        )
        for episode_id, outcome, failure_class, reward, steps in rows:
            _, new_outcome, new_class, new_reward = by_id[episode_id]
            self.finished(new_outcome, new_class, new_reward, steps)
            if outcome is not None:
                self.finished(outcome, failure_class, reward or 0.0, steps, weight=-1)

    def dropped(self, rows: Iterable[Sequence[Any]]) -> None:
        """Episodes deleted, as rows of `COUNTED_COLUMNS`."""
        self.episodes(rows, -1)

    def episodes(self, rows: Iterable[Sequence[Any]], weight: int = 1) -> None:
        """Episodes as rows of `COUNTED_COLUMNS`, in (weight 1) or out (-1)."""
        for outcome, failure_class, reward, steps, unparsed, *actions in rows:
            if outcome is not None:
                self.finished(outcome, failure_class, reward or 0.0, steps, weight=weight)
            by_action = dict(zip(ACTION_KINDS, actions, strict=True))
            self.steps({a: weight * n for a, n in (by_action | {UNPARSED: unparsed}).items()})

    def apply(self, conn: Connection, run_id: int) -> None:
        """Write the change, in the caller's transaction."""
        if any(self.totals.values()):
            totals = {"b_run": run_id} | {f"b_{n}": v for n, v in self.totals.items()}
            executemany(conn, _ADD, [totals])
        rows = [
            {"run_id": run_id, "kind": kind, "key": key, "n": n}
            for (kind, key), n in sorted(self.counts.items())  # one lock order for every writer
            if n
        ]
        executemany(conn, _upsert(conn.dialect.name), rows)


def counted(conn: Connection, scope: Sequence[ColumnElement[bool]]) -> RunChange:
    """The totals and counts of the episodes `scope` selects, as the write path counts a
    run's, read row by row: for a few thousand episodes, such as one training step of a run
    (a side of Compare). `recompute` groups whole runs in SQL."""
    change = RunChange()
    change.episodes(conn.execute(select(*COUNTED_COLUMNS).where(*scope)))
    return change


_ADD = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(
        {name: _RUNS.c[name] + bindparam(f"b_{name}") for name in COLUMNS}
        | {"reward_sum": saturating_add(_RUNS.c.reward_sum, bindparam("b_reward_sum"))}
    )
)


@lru_cache(maxsize=4)
def _upsert(dialect: str) -> Any:
    """INSERT a count, or add to it when the run has one for that key already."""
    if dialect not in ("sqlite", "postgresql"):
        raise ValueError(f"run counts need SQLite or PostgreSQL, not {dialect}")
    module = sqlite if dialect == "sqlite" else postgresql
    stmt = module.insert(_COUNTS)
    return stmt.on_conflict_do_update(
        index_elements=[_COUNTS.c.run_id, _COUNTS.c.kind, _COUNTS.c.key],
        set_={"n": _COUNTS.c.n + stmt.excluded.n},
    )


def recompute(conn: Connection, run_ids: Sequence[int] | None = None) -> None:
    """Set the totals and counts of these runs (None: every run) from their episodes."""
    scope = [] if run_ids is None else [Episode.run_id.in_(run_ids)]
    finished = [*scope, Episode.outcome.is_not(None)]
    changes: dict[int, RunChange] = {}

    def change(run_id: int) -> RunChange:
        return changes.setdefault(run_id, RunChange())

    counters = [getattr(Episode, f"{a.lower()}_steps") for a in ACTION_KINDS]
    for run_id, unparsed, *sums in conn.execute(
        select(Episode.run_id, func.sum(Episode.unparsed_steps), *map(func.sum, counters))
        .where(*scope)
        .group_by(Episode.run_id)
    ):
        by_action = dict(zip(ACTION_KINDS, sums, strict=True)) | {UNPARSED: unparsed}
        change(run_id).steps({a: int(n or 0) for a, n in by_action.items()})
    # Finished episodes grouped by everything `finished` reads: few distinct rows in practice.
    for run_id, outcome, failure_class, reward, steps, n in conn.execute(
        select(
            Episode.run_id,
            Episode.outcome,
            Episode.failure_class,
            Episode.reward,
            Episode.steps,
            func.count(),
        )
        .where(*finished)
        .group_by(
            Episode.run_id, Episode.outcome, Episode.failure_class, Episode.reward, Episode.steps
        )
    ):
        weight = int(n)
        change(run_id).finished(str(outcome), failure_class, float(reward or 0.0), steps, weight)
    wanted = select(_RUNS.c.id)
    if run_ids is not None:
        wanted = wanted.where(_RUNS.c.id.in_(run_ids))
    ids = list(conn.scalars(wanted))
    if not ids:
        return
    conn.execute(delete(_COUNTS).where(_COUNTS.c.run_id.in_(ids)))
    conn.execute(
        update(_RUNS)
        .where(_RUNS.c.id == bindparam("b_run"))
        .values({name: bindparam(f"b_{name}") for name in COLUMNS}),
        [{"b_run": i} | {f"b_{n}": change(i).totals[n] for n in COLUMNS} for i in ids],
    )
    rows = [
        {"run_id": i, "kind": kind, "key": key, "n": n}
        for i in ids
        for (kind, key), n in sorted(change(i).counts.items())
        if n
    ]
    if rows:
        conn.execute(insert(_COUNTS), rows)
