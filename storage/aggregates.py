"""Cross-run aggregates in SQL: per-question comparison and per-run distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, Integer, case, func, literal_column, select, union
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from rollout_core.records import ACTION_KINDS, FAILURE_CLASSES, OUTCOMES
from storage.cursors import decode_cursor, encode_cursor
from storage.models import Episode
from storage.read_models import (
    Distribution,
    OutcomeMatrix,
    Page,
    QuestionComparison,
    QuestionOutcomes,
    RunCell,
)

REWARD_BIN = 0.1
# Guards the bin index against float error: (0.7 - 0.1) / 0.1 is 5.999999999999999.
_BIN_EPSILON = 1e-9


class floor_nonneg(FunctionElement[int]):
    """floor() of a non-negative number; SQLite lacks floor() unless built with math functions."""

    type = Integer()
    inherit_cache = True


@compiles(floor_nonneg)
def _floor_default(element: floor_nonneg, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(FLOOR({compiler.process(element.clauses, **kw)}) AS INTEGER)"


@compiles(floor_nonneg, "sqlite")
def _floor_sqlite(element: floor_nonneg, compiler: SQLCompiler, **kw: Any) -> str:
    # CAST truncates toward zero in SQLite, which is floor for non-negative numbers.
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


def compare_page(
    session: Session, run_ids: Sequence[int], limit: int, cursor: str | None
) -> Page[QuestionComparison]:
    """One page of questions (keyset on question_id) with each run's finished results."""
    if not run_ids:
        return Page(items=[], next_cursor=None)
    ids = list(dict.fromkeys(run_ids))
    after = decode_cursor(cursor, expect={"runs": ids})["q"] if cursor is not None else None
    qids = _next_question_ids(session, ids, after, limit + 1)
    more = len(qids) > limit
    qids = qids[:limit]
    base = [Episode.run_id.in_(ids), Episode.outcome.is_not(None)]
    cells: dict[str, dict[int, RunCell]] = {q: {} for q in qids}
    about: dict[str, tuple[str, str]] = {}
    if qids:
        cell_rows = session.execute(
            select(
                *_cell_counts(),
                func.min(Episode.db_id),
                func.min(Episode.question),
            )
            .where(*base, Episode.question_id.in_(qids))
            .group_by(Episode.question_id, Episode.run_id)
        )
        for qid, run_id, n, correct, db_id, question in cell_rows:
            cells[qid][run_id] = RunCell(run_id, int(n), int(correct or 0), [])
            about.setdefault(qid, (db_id, question))
        id_rows = session.execute(
            select(Episode.question_id, Episode.run_id, Episode.id)
            .where(*base, Episode.question_id.in_(qids))
            .order_by(Episode.id)
        )
        for qid, run_id, eid in id_rows:
            cells[qid][run_id].episode_ids.append(eid)
    items = [QuestionComparison(q, *about[q], cells[q]) for q in qids]
    next_cursor = encode_cursor(runs=ids, q=qids[-1]) if more else None
    return Page(items=items, next_cursor=next_cursor)


def _cell_counts() -> tuple[Any, Any, Any, Any]:
    """Columns of a (question, run) group: question id, run id, episodes, correct ones."""
    correct = func.sum(case((Episode.outcome == "correct", 1), else_=0))
    return Episode.question_id, Episode.run_id, func.count(), correct


def compare_outcomes(session: Session, run_ids: Sequence[int]) -> list[QuestionOutcomes]:
    """Every question any of the runs finished, with each run's episode and correct counts.

    One grouped read on the (run_id, question_id) index, a row per question and run: the
    Compare page's statistics cover all questions without loading their text or episodes.
    """
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return []
    rows = session.execute(
        select(*_cell_counts())
        .where(Episode.run_id.in_(ids), Episode.outcome.is_not(None))
        .group_by(Episode.question_id, Episode.run_id)
        .order_by(Episode.question_id)
    )
    out: list[QuestionOutcomes] = []
    for qid, run_id, n, correct in rows:
        if not out or out[-1].question_id != qid:
            out.append(QuestionOutcomes(qid, {}))
        out[-1].cells[run_id] = RunCell(run_id, int(n), int(correct or 0), [])
    return out


def outcome_matrix(session: Session, run_ids: Sequence[int]) -> OutcomeMatrix:
    """Episode and correct counts of every question any of the runs finished, per run.

    One GROUP BY on the (run_id, question_id, outcome, reward) index through Core (no ORM
    row loading): 10 runs x 5,000 questions is 50,000 small rows.
    """
    ids = list(dict.fromkeys(run_ids))
    col = {r: j for j, r in enumerate(ids)}
    if not ids:
        return OutcomeMatrix(ids, [], [], [])
    rows = session.connection().execute(
        select(*_cell_counts())
        .where(Episode.run_id.in_(ids), Episode.outcome.is_not(None))
        .group_by(Episode.question_id, Episode.run_id)
        .order_by(Episode.question_id)
    )
    qids: list[str] = []
    episodes: list[list[int]] = []
    correct: list[list[int]] = []
    width = len(ids)
    for qid, run_id, n, n_correct in rows:
        if not qids or qids[-1] != qid:
            qids.append(qid)
            episodes.append([0] * width)
            correct.append([0] * width)
        episodes[-1][col[run_id]] = int(n)
        correct[-1][col[run_id]] = int(n_correct or 0)
    return OutcomeMatrix(ids, qids, episodes, correct)


def _next_question_ids(
    session: Session, run_ids: list[int], after: str | None, n: int
) -> list[str]:
    """The first n question ids after `after` that any run finished, in the database's order.

    Each run contributes its own first n from the (run_id, question_id, ...) index, a short
    range scan, instead of grouping every episode of the runs; the union is ordered in SQL so
    the keyset follows the database's collation.
    """
    parts = []
    for run_id in run_ids:
        part = (
            select(Episode.question_id)
            .distinct()
            .where(Episode.run_id == run_id, Episode.outcome.is_not(None))
            .order_by(Episode.question_id)
            .limit(n)
        )
        if after is not None:
            part = part.where(Episode.question_id > after)
        sub = part.subquery()
        parts.append(select(sub.c.question_id))
    merged = union(*parts).subquery()
    stmt = select(merged.c.question_id).order_by(merged.c.question_id).limit(n)
    return list(session.scalars(stmt))


def distributions(session: Session, run_ids: Sequence[int]) -> list[Distribution]:
    """Action mix, reward and steps histograms and outcome counts, one per requested run."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return []
    finished = [Episode.run_id.in_(ids), Episode.outcome.is_not(None)]
    # From the per-episode counters, so the chart never scans the steps table.
    counters = [getattr(Episode, f"{a.lower()}_steps") for a in ACTION_KINDS]
    counters.append(Episode.unparsed_steps)
    names = (*ACTION_KINDS, "UNPARSED")
    actions: dict[int, dict[str, int]] = {r: dict.fromkeys(names, 0) for r in ids}
    for run_id, *sums in session.execute(
        select(Episode.run_id, *(func.sum(c) for c in counters))
        .where(Episode.run_id.in_(ids))
        .group_by(Episode.run_id)
    ):
        actions[run_id] = {name: int(n or 0) for name, n in zip(names, sums, strict=True)}

    lowest = (
        select(Episode.run_id.label("run_id"), func.min(Episode.reward).label("lo"))
        .where(*finished)
        .group_by(Episode.run_id)
        .subquery()
    )
    # Constants inline, not bound: PostgreSQL matches the GROUP BY expression to the SELECT
    # one textually, and two sets of $n parameters would not match.
    width = literal_column(repr(REWARD_BIN), Float)
    eps = literal_column(repr(_BIN_EPSILON), Float)
    bin_no = floor_nonneg((Episode.reward - lowest.c.lo) / width + eps)
    reward_rows = session.execute(
        select(Episode.run_id, lowest.c.lo, bin_no, func.count())
        .join(lowest, lowest.c.run_id == Episode.run_id)
        .where(*finished)
        .group_by(Episode.run_id, lowest.c.lo, bin_no)
        .order_by(Episode.run_id, bin_no)
    )
    rewards: dict[int, list[tuple[float, int]]] = {r: [] for r in ids}
    for run_id, lo, k, n in reward_rows:
        rewards[run_id].append((round(float(lo) + int(k) * REWARD_BIN, 10), int(n)))

    steps: dict[int, list[tuple[int, int]]] = {r: [] for r in ids}
    for run_id, n_steps, n in session.execute(
        select(Episode.run_id, Episode.steps, func.count())
        .where(*finished)
        .group_by(Episode.run_id, Episode.steps)
        .order_by(Episode.run_id, Episode.steps)
    ):
        steps[run_id].append((int(n_steps), int(n)))

    outcomes: dict[int, dict[str, int]] = {r: dict.fromkeys(OUTCOMES, 0) for r in ids}
    for run_id, outcome, n in session.execute(
        select(Episode.run_id, Episode.outcome, func.count())
        .where(*finished)
        .group_by(Episode.run_id, Episode.outcome)
    ):
        outcomes[run_id][str(outcome)] = int(n)

    classes: dict[int, dict[str, int]] = {r: dict.fromkeys(FAILURE_CLASSES, 0) for r in ids}
    for run_id, failure_class, n in session.execute(
        select(Episode.run_id, Episode.failure_class, func.count())
        .where(*finished, Episode.failure_class.is_not(None))
        .group_by(Episode.run_id, Episode.failure_class)
    ):
        classes[run_id][str(failure_class)] = int(n)

    return [Distribution(r, actions[r], rewards[r], steps[r], outcomes[r], classes[r]) for r in ids]
