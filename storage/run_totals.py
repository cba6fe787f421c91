"""Each run's running totals (episodes finished and correct, reward and step sums), kept on its
`runs` row by the write path, so the Runs list reads a row per run, not a run's episodes.

At a million episodes the GROUP BY over them took 2.3 s; the totals cost one UPDATE of the run's
row per written batch. Every write that changes what they count goes through here: steps
counted (`counted`), episodes finished (`finishing`) and unfinished episodes deleted
(`dropped`). `recompute` rebuilds them from the episodes (the migration, bulk fills).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, case, func, select, update

from rollout_core.records import EpisodeKey, EpisodeRecord
from storage.models import Episode, Run

_RUNS = cast(Table, Run.__table__)


@dataclass(frozen=True, slots=True)
class Totals:
    """A change to (or the value of) a run's totals; field names are the `runs` columns."""

    finished_episodes: int = 0
    correct_episodes: int = 0
    error_episodes: int = 0
    reward_sum: float = 0.0
    finished_step_sum: int = 0
    """Steps of the finished episodes: the mean steps per episode."""
    step_sum: int = 0
    """Steps of all the run's episodes, finished or not: the live parse failure rate."""
    unparsed_sum: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __neg__(self) -> Totals:
        return Totals(*(-getattr(self, f.name) for f in fields(self)))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


COLUMNS = tuple(f.name for f in fields(Totals))

_ADD = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values({name: _RUNS.c[name] + bindparam(f"b_{name}") for name in COLUMNS})
)


def add(conn: Connection, run_id: int, change: Totals) -> None:
    """Add a change to the run's totals, in the caller's transaction."""
    if change:
        conn.execute(_ADD, {"b_run": run_id} | {f"b_{n}": getattr(change, n) for n in COLUMNS})


def counted(steps: int, unparsed: int) -> Totals:
    """Steps written to the run's episodes."""
    return Totals(step_sum=steps, unparsed_sum=unparsed)


def _finished_part(outcome: str | None, reward: float | None, steps: int) -> Totals:
    if outcome is None:
        return Totals()
    return Totals(
        finished_episodes=1,
        correct_episodes=int(outcome == "correct"),
        error_episodes=int(outcome == "error"),
        reward_sum=float(reward or 0.0),
        finished_step_sum=steps,
    )


def finishing(
    conn: Connection, records: Sequence[EpisodeRecord], ids: Mapping[EpisodeKey, int]
) -> Totals:
    """The change these finish records make (read before they are written): their outcomes in,
    and an earlier outcome of the same episode, if one was recorded, out."""
    by_id = {ids[e.key]: e for e in records}
    rows = conn.execute(
        select(Episode.id, Episode.outcome, Episode.reward, Episode.steps).where(
            Episode.id.in_(by_id)
        )
    )
    change = Totals()
    for episode_id, outcome, reward, steps in rows:
        new = by_id[episode_id]
        change += _finished_part(new.outcome, new.reward, steps)
        change += -_finished_part(outcome, reward, steps)
    return change


def dropped(rows: Iterable[tuple[Any, ...]]) -> Totals:
    """The change deleting episodes makes, from their (outcome, reward, steps, unparsed_steps)."""
    change = Totals()
    for outcome, reward, steps, unparsed in rows:
        change += -(_finished_part(outcome, reward, steps) + counted(steps, unparsed))
    return change


def recompute(conn: Connection, run_ids: Sequence[int] | None = None) -> None:
    """Set the totals of these runs (None: every run) from their episodes."""
    finished = Episode.outcome.is_not(None)
    stmt = select(
        Episode.run_id,
        func.count(Episode.outcome),
        func.sum(case((Episode.outcome == "correct", 1), else_=0)),
        func.sum(case((Episode.outcome == "error", 1), else_=0)),
        func.sum(case((finished, Episode.reward), else_=0.0)),
        func.sum(case((finished, Episode.steps), else_=0)),
        func.sum(Episode.steps),
        func.sum(Episode.unparsed_steps),
    ).group_by(Episode.run_id)
    wanted = select(_RUNS.c.id)
    if run_ids is not None:
        stmt = stmt.where(Episode.run_id.in_(run_ids))
        wanted = wanted.where(_RUNS.c.id.in_(run_ids))
    found = {
        run_id: Totals(int(n), int(ok or 0), int(err or 0), float(reward or 0.0),
                       int(fin_steps or 0), int(steps or 0), int(unparsed or 0))
        for run_id, n, ok, err, reward, fin_steps, steps, unparsed in conn.execute(stmt)
    }  # fmt: skip
    rows = [
        {"b_run": i} | {f"b_{n}": getattr(found.get(i, Totals()), n) for n in COLUMNS}
        for (i,) in conn.execute(wanted)
    ]
    if rows:
        conn.execute(
            update(_RUNS)
            .where(_RUNS.c.id == bindparam("b_run"))
            .values({name: bindparam(f"b_{name}") for name in COLUMNS}),
            rows,
        )
