"""Cross-run aggregates in SQL: per-question comparison and per-run distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select, union
from sqlalchemy.orm import Session

from rollout_core.records import ACTION_KINDS, FAILURE_CLASSES, OUTCOMES
from storage.cursors import decode_cursor, encode_cursor
from storage.models import Episode, RunCount
from storage.read_models import (
    Distribution,
    OutcomeMatrix,
    Page,
    QuestionComparison,
    QuestionOutcomes,
    RunCell,
)
from storage.run_totals import UNPARSED

REWARD_BIN = 0.1
REWARD_BIN_THOUSANDTHS = 100  # REWARD_BIN in the thousandths the `reward` counts are kept in


def compare_page(
    session: Session,
    run_ids: Sequence[int],
    limit: int,
    cursor: str | None,
    *,
    with_episode_ids: bool = True,
) -> Page[QuestionComparison]:
    """One page of questions (keyset on question_id) with each run's finished results.

    Without `with_episode_ids` the cells hold counts only (their `episode_ids` empty): a list
    of questions reads the (run, question, outcome) index, not every episode's row.
    """
    if not run_ids:
        return Page(items=[], next_cursor=None)
    ids = list(dict.fromkeys(run_ids))
    after = decode_cursor(cursor, expect={"runs": ids})["q"] if cursor is not None else None
    qids = _next_question_ids(session, ids, after, limit + 1)
    more = len(qids) > limit
    qids = qids[:limit]
    items = comparisons(session, ids, qids, with_episode_ids=with_episode_ids)
    next_cursor = encode_cursor(runs=ids, q=qids[-1]) if more else None
    return Page(items=items, next_cursor=next_cursor)


def comparisons(
    session: Session, run_ids: Sequence[int], qids: Sequence[str], *, with_episode_ids: bool
) -> list[QuestionComparison]:
    """These questions' finished results in each run, in `qids` order (unplayed ones left out)."""
    if not qids or not run_ids:
        return []
    base = [
        Episode.run_id.in_(run_ids),
        Episode.outcome.is_not(None),
        Episode.question_id.in_(qids),
    ]
    cells: dict[str, dict[int, RunCell]] = {q: {} for q in qids}
    first: dict[str, int] = {}
    for qid, run_id, n, correct, lowest in session.execute(
        select(*_cell_counts(), func.min(Episode.id))
        .where(*base)
        .group_by(Episode.question_id, Episode.run_id)
    ):
        cells[qid][run_id] = RunCell(run_id, int(n), int(correct or 0), [])
        first[qid] = min(lowest, first.get(qid, lowest))
    # The question's text and database from one episode each, by primary key.
    about = {
        qid: (db_id, question)
        for qid, db_id, question in session.execute(
            select(Episode.question_id, Episode.db_id, Episode.question).where(
                Episode.id.in_(first.values())
            )
        )
    }
    if with_episode_ids:
        for qid, run_id, eid in session.execute(
            select(Episode.question_id, Episode.run_id, Episode.id)
            .where(*base)
            .order_by(Episode.id)
        ):
            cells[qid][run_id].episode_ids.append(eid)
    return [QuestionComparison(q, *about[q], cells[q]) for q in qids if q in about]


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
    """Action mix, reward and steps histograms and outcome counts, one per requested run.

    From the counts the write path keeps (`storage.run_totals`): a few rows per run, however
    many episodes it has.
    """
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return []
    counts: dict[int, dict[str, dict[str, int]]] = {r: {} for r in ids}
    for run_id, kind, key, n in session.execute(
        select(RunCount.run_id, RunCount.kind, RunCount.key, RunCount.n).where(
            RunCount.run_id.in_(ids), RunCount.n > 0
        )
    ):
        counts[run_id].setdefault(kind, {})[key] = int(n)
    return [_distribution(r, counts[r]) for r in ids]


def _distribution(run_id: int, counts: dict[str, dict[str, int]]) -> Distribution:
    actions = {a: counts.get("action", {}).get(a, 0) for a in (*ACTION_KINDS, UNPARSED)}
    steps = sorted((int(k), n) for k, n in counts.get("steps", {}).items())
    outcomes = dict.fromkeys(OUTCOMES, 0) | counts.get("outcome", {})
    classes = dict.fromkeys(FAILURE_CLASSES, 0) | counts.get("class", {})
    return Distribution(
        run_id, actions, reward_bins(counts.get("reward", {})), steps, outcomes, classes
    )


def reward_bins(by_key: dict[str, int]) -> list[tuple[float, int]]:
    """(bin start, count) in bins of width 0.1 from the lowest reward, from rewards counted in
    thousandths (integer arithmetic: no bin is lost to float error)."""
    if not by_key:
        return []
    keys = {int(k): n for k, n in by_key.items()}
    lowest = min(keys)
    bins: dict[int, int] = {}
    for key, n in keys.items():
        k = (key - lowest) // REWARD_BIN_THOUSANDTHS
        bins[k] = bins.get(k, 0) + n
    return [(round(lowest / 1000 + k * REWARD_BIN, 10), n) for k, n in sorted(bins.items())]
