"""An episode's row as the write path builds it: its step counters and its outcome columns.

An episode is inserted with its counters over the batch that starts it, and with its outcome
when that batch finishes it too; otherwise later batches bump its counters (`COUNT_STEPS`) and
finish it (`FINISH_EPISODE`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Boolean, Integer, Table, bindparam, func, or_, update

from rollout_core.records import ACTION_KINDS, EpisodeKey, EpisodeRecord, StepRecord
from storage.models import Episode
from storage.run_totals import UNPARSED
from storage.text_clean import clean_text

_EPISODES = cast(Table, Episode.__table__)

# Episode columns `<action>_steps` count the parsed steps of each action.
ACTION_COLUMNS = tuple(a.lower() for a in ACTION_KINDS)


def is_sql_error(step: StepRecord) -> bool:
    """A QUERY step the database (or the sandbox) refused."""
    return step.action == "QUERY" and step.error is not None


# An episode's step counters: the steps, the unparsed ones, the parsed ones per action.
COUNTER_COLUMNS = ("steps", "unparsed_steps", *(f"{a}_steps" for a in ACTION_COLUMNS))
ZERO_COUNTS: dict[str, Any] = dict.fromkeys(COUNTER_COLUMNS, 0) | {
    "has_unparsed": False,
    "has_sql_error": False,
}
"""An episode's counter columns before its first step."""
_ACTION_COLUMN = {a: f"{a.lower()}_steps" for a in ACTION_KINDS}

COUNT_PARAMETERS = ("b_id", *(f"b_{c}" for c in ZERO_COUNTS))
"""`COUNT_STEPS`' parameters: an episode's id, then its counters in `ZERO_COUNTS`' order."""

# Bumps an episode's counters by a batch's steps, in the same transaction as those steps.
COUNT_STEPS = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        **{c: _EPISODES.c[c] + bindparam(f"b_{c}", type_=Integer) for c in COUNTER_COLUMNS},
        **{
            c: or_(_EPISODES.c[c], bindparam(f"b_{c}", type_=Boolean))
            for c in ("has_unparsed", "has_sql_error")
        },
    )
)


def step_counts(
    keys: Sequence[EpisodeKey], steps: Sequence[StepRecord]
) -> dict[EpisodeKey, dict[str, Any]]:
    """Each episode's counter columns over these steps (`keys`: each step's episode)."""
    counts: dict[EpisodeKey, dict[str, Any]] = {}
    for key, s in zip(keys, steps, strict=True):
        row = counts.get(key)
        if row is None:
            row = counts[key] = ZERO_COUNTS.copy()
        row["steps"] += 1
        if s.parsed and s.action is not None:
            row[_ACTION_COLUMN[s.action]] += 1
        else:
            row["unparsed_steps"] += 1
            row["has_unparsed"] = True
        if not row["has_sql_error"] and is_sql_error(s):
            row["has_sql_error"] = True
    return counts


def by_action(counts: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The steps counted, by action (`UNPARSED`: those with none), for the run's totals."""
    rows = list(counts)
    # A sum per column: a Counter bumped per row and action cost 1% of a small transaction.
    by_action = Counter({UNPARSED: sum(row["unparsed_steps"] for row in rows)})
    for action, column in _ACTION_COLUMN.items():
        by_action[action] = sum(row[column] for row in rows)
    return by_action


OUTCOME_COLUMNS = (
    "outcome",
    "reward",
    "progress",
    "operational",
    "answer",
    "duration_seconds",
    "error",
    "failure_class",
    "tokens_out",
    "mean_logprob",
    "trainer_advantage",
    "ended_at",
)
"""An episode's columns that stay NULL until it finishes."""


def outcome_values(e: EpisodeRecord, failure_class: str | None = None) -> tuple[Any, ...]:
    """A finished episode's `OUTCOME_COLUMNS` (`failure_class`: the store's, if it had none)."""
    return (
        e.outcome,
        e.reward,
        e.progress,
        e.operational,
        clean_text(e.answer),
        e.duration_seconds,
        clean_text(e.error),
        e.failure_class or failure_class,
        e.tokens_out,
        e.mean_logprob,
        e.trainer_advantage,
        e.ended_at,
    )


NOT_FINISHED = (None,) * len(OUTCOME_COLUMNS)
EPISODE_COLUMNS = (
    "run_id",
    "question_id",
    "sample_index",
    "seed",
    "db_id",
    "question",
    "gold_sql",
    "started_at",
    "forked_from",
    "fork_step",
    "train_step",
    "group_index",
    *ZERO_COUNTS,
    *OUTCOME_COLUMNS,
)
"""A new episode's columns, in the order of `writes._insert_started`'s values."""

# Finishes an episode inserted in an earlier batch. A trainer may score an episode before
# its producer finishes it (an env server's session ends an unanswered one at its next
# reset): an advantage the record does not carry keeps the one recorded.
_FINISHED = {c: bindparam(f"b_{c}", type_=_EPISODES.c[c].type) for c in OUTCOME_COLUMNS}
FINISH_EPISODE = (
    update(_EPISODES)
    .where(_EPISODES.c.id == bindparam("b_id"))
    .values(
        {
            **_FINISHED,
            "trainer_advantage": func.coalesce(
                _FINISHED["trainer_advantage"], _EPISODES.c.trainer_advantage
            ),
        }
    )
)
FINISH_KEYS = tuple(f"b_{c}" for c in OUTCOME_COLUMNS)


def finish_row(episode_id: int, e: EpisodeRecord, classes: Mapping[int, str]) -> dict[str, Any]:
    outcome = outcome_values(e, None if e.failure_class else classes[episode_id])
    return {"b_id": episode_id} | dict(zip(FINISH_KEYS, outcome, strict=True))
