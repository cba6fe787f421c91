"""Cross-run aggregates in SQL: per-question comparison and per-run distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select, union, union_all
from sqlalchemy.orm import Session

from rollout_core.records import ACTION_KINDS, FAILURE_CLASSES, OUTCOMES
from storage.collector import collector_paused
from storage.cursors import decode_cursor, encode_cursor
from storage.models import Episode, Run, RunCount
from storage.read_models import (
    Distribution,
    IdApart,
    OutcomeMatrix,
    Page,
    QuestionComparison,
    QuestionOutcomes,
    RunCell,
    RunKey,
    RunStep,
    run_of,
)
from storage.replayed import latest_play, replaced_episodes
from storage.run_totals import UNPARSED, counted

REWARD_BIN = 0.1
REWARD_BIN_THOUSANDTHS = 100  # REWARD_BIN in the thousandths the `reward` counts are kept in


def compare_page(
    session: Session,
    keys: Sequence[RunKey],
    limit: int,
    cursor: str | None,
    *,
    with_episode_ids: bool = True,
) -> Page[QuestionComparison]:
    """One page of questions (keyset on question_id) with each run's finished results; a key
    that is a `RunStep` counts that training step's episodes of its run alone.

    Without `with_episode_ids` the cells hold counts only (their `episode_ids` empty): a list
    of questions reads the (run, question, outcome) index, not every episode's row.
    """
    if not keys:
        return Page(items=[], next_cursor=None)
    keys = list(dict.fromkeys(keys))
    named = [str(k) if isinstance(k, RunStep) else k for k in keys]
    after = decode_cursor(cursor, expect={"runs": named})["q"] if cursor is not None else None
    qids = _next_question_ids(session, keys, after, limit + 1)
    more = len(qids) > limit
    qids = qids[:limit]
    items = comparisons(session, keys, qids, with_episode_ids=with_episode_ids)
    next_cursor = encode_cursor(runs=named, q=qids[-1]) if more else None
    return Page(items=items, next_cursor=next_cursor)


def comparisons(
    session: Session, keys: Sequence[RunKey], qids: Sequence[str], *, with_episode_ids: bool
) -> list[QuestionComparison]:
    """These questions' finished results in each run (or training step of a run), in `qids`
    order (unplayed ones left out)."""
    if not qids or not keys:
        return []
    keys = list(dict.fromkeys(keys))
    order = {k: i for i, k in enumerate(keys)}
    cells: dict[str, dict[RunKey, RunCell]] = {q: {} for q in qids}
    first: dict[str, tuple[int, int]] = {}
    for key, qid, n, correct, low in _counts_by_question(
        session, keys, Episode.question_id.in_(qids), lowest=True
    ):
        cells[qid][key] = RunCell(run_of(key), n, correct, [])
        if low is not None:
            first[qid] = min((order[key], low), first.get(qid, (order[key], low)))
    # The question's text and database from one episode each, by primary key: the first
    # side's that played it (the baseline's), which an id asking another question elsewhere
    # is set against (`compare_outcomes_apart`).
    about = {
        qid: (db_id, question)
        for qid, db_id, question in session.execute(
            select(Episode.question_id, Episode.db_id, Episode.question).where(
                Episode.id.in_([low for _, low in first.values()])
            )
        )
    }
    if with_episode_ids:
        runs = sorted({run_of(k) for k in keys})
        stepped = sorted({k.run_id for k in keys if isinstance(k, RunStep)})
        gone = {i for r in stepped for i in session.scalars(replaced_episodes(r))}
        for qid, run_id, train_step, eid in session.execute(
            select(Episode.question_id, Episode.run_id, Episode.train_step, Episode.id)
            .where(
                Episode.run_id.in_(runs),
                Episode.outcome.is_not(None),
                Episode.question_id.in_(qids),
            )
            .order_by(Episode.id)
        ):
            held = cells[qid]
            if run_id in held:
                held[run_id].episode_ids.append(eid)
            at = None if train_step is None else RunStep(run_id, train_step)
            if at in held and eid not in gone:
                held[at].episode_ids.append(eid)
    return [QuestionComparison(q, *about[q], cells[q]) for q in qids if q in about]


_IN_CHUNK = 500
"""Question ids bound to one `IN` (SQLite builds before 3.32 take 999 values a statement)."""


def failure_counts_on(session: Session, key: RunKey, question_ids: Sequence[str]) -> dict[str, int]:
    """A run's (or training step's) finished episodes per failure class on these questions
    alone; its `run_counts` cover all of its questions."""
    counts: dict[str, int] = dict.fromkeys(FAILURE_CLASSES, 0)
    ids = sorted(set(question_ids))
    for at in range(0, len(ids), _IN_CHUNK):
        stmt = (
            select(Episode.failure_class, func.count())
            .where(
                *_episodes_of(key),
                Episode.failure_class.is_not(None),
                Episode.question_id.in_(ids[at : at + _IN_CHUNK]),
            )
            .group_by(Episode.failure_class)
        )
        for failure_class, n in session.execute(stmt):
            counts[str(failure_class)] = counts.get(str(failure_class), 0) + int(n)
    return counts


def _episodes_of(key: RunKey) -> list[ColumnElement[bool]]:
    """The episodes a key names: a run's, or one training step's of a run."""
    if isinstance(key, RunStep):
        # A step as its latest play (a trainer resumed before it: storage.replayed).
        return [
            Episode.run_id == key.run_id,
            Episode.train_step == key.train_step,
            latest_play(key.run_id),
        ]
    return [Episode.run_id == key]


def _finished_of(key: RunKey, name: str, *where: ColumnElement[bool]) -> Any:
    """The finished episodes a key names (and `where` keeps), as a FROM of their question,
    outcome and id: a run's, or one training step's of a run.

    A step's rows are read first, as a materialized CTE: SQLite's sampled statistics rate
    (run, training step) no more selective than the run alone, and a grouped or ordered read
    of the step would walk the whole run through its question index (docs/benchmarks.md,
    "Compare over training steps").
    """
    rows = select(Episode.question_id, Episode.outcome, Episode.id).where(
        *_episodes_of(key), Episode.outcome.is_not(None), *where
    )
    if isinstance(key, RunStep):
        return rows.cte(name).prefix_with("MATERIALIZED")
    return rows.subquery(name)


def _counts_by_question(
    session: Session, keys: list[RunKey], *where: ColumnElement[bool], lowest: bool = False
) -> list[tuple[RunKey, str, int, int, int | None]]:
    """Per key and question, in question order: (key, question id, episodes, correct, and
    with `lowest` the lowest episode id, else None).

    The whole runs in one GROUP BY (question, run) on the (run_id, question_id, ...) index;
    each training step in a grouped read of its own, joined with UNION ALL (a run and one of
    its steps can both be compared, so one episode may count for two keys).
    """
    runs = [k for k in keys if not isinstance(k, RunStep)]
    parts = []
    if runs:
        e = Episode
        parts.append(
            select(e.run_id, literal(None), e.question_id, func.count(), _correct(e.outcome))
            .add_columns(func.min(e.id) if lowest else literal(None))
            .where(e.run_id.in_(runs), e.outcome.is_not(None), *where)
            .group_by(e.question_id, e.run_id)
        )
    for i, key in enumerate(k for k in keys if isinstance(k, RunStep)):
        src = _finished_of(key, f"step_{i}", *where)
        parts.append(
            select(literal(key.run_id), literal(key.train_step), src.c.question_id)
            .add_columns(func.count(), _correct(src.c.outcome))
            .add_columns(func.min(src.c.id) if lowest else literal(None))
            .group_by(src.c.question_id)
        )
    if len(parts) == 1:
        stmt = parts[0].order_by(parts[0].selected_columns[2])
    else:
        merged = union_all(*parts).subquery()
        stmt = select(merged).order_by(merged.c[2])
    # Through Core: tens of thousands of small rows, and the ORM's handling of each costs
    # more than the query.
    rows = session.connection().execute(stmt)
    return [
        (run if step is None else RunStep(run, step), qid, int(n), int(c or 0), low)
        for run, step, qid, n, c, low in rows
    ]


def _correct(outcome: Any) -> Any:
    return func.sum(case((outcome == "correct", 1), else_=0))


def compare_outcomes(session: Session, keys: Sequence[RunKey]) -> list[QuestionOutcomes]:
    """Every question any of the runs (or training steps of runs) finished, with each one's
    episode and correct counts.

    One grouped read on the (run_id, question_id) index for the runs (and one on the training
    index for each step), a row per question and run: the Compare page's statistics cover all
    questions without loading their text or episodes.
    """
    keys = list(dict.fromkeys(keys))
    if not keys:
        return []
    return _outcomes(_counts_by_question(session, keys))


def compare_outcomes_apart(
    session: Session, keys: Sequence[RunKey]
) -> tuple[list[QuestionOutcomes], list[IdApart]]:
    """`compare_outcomes`, and the question ids two sides share whose episodes ask different
    questions, in question order: each side set against the first given that played the id.

    The same grouped read, with each (side, question)'s lowest episode id; then the question
    and database of those episodes alone, by primary key, for the ids two or more sides share.
    """
    keys = list(dict.fromkeys(keys))
    if not keys:
        return [], []
    rows = _counts_by_question(session, keys, lowest=True)
    return _outcomes(rows), _ids_apart(session, keys, rows)


_Counts = list[tuple[RunKey, str, int, int, int | None]]
"""`_counts_by_question`'s rows: (side, question id, episodes, correct, lowest episode id)."""


def _outcomes(rows: _Counts) -> list[QuestionOutcomes]:
    out: list[QuestionOutcomes] = []
    with collector_paused():  # an object a cell, a question and run each
        for key, qid, n, correct, _ in rows:
            if not out or out[-1].question_id != qid:
                out.append(QuestionOutcomes(qid, {}))
            out[-1].cells[key] = RunCell(run_of(key), n, correct, [])
    return out


def _ids_apart(session: Session, keys: list[RunKey], rows: _Counts) -> list[IdApart]:
    """The shared question ids whose sides ask different questions, from each side's lowest
    episode of the id (its samples all ask the one question). Sides that rollscope played on
    one questions file number its questions alike: only the others' texts are read (runs on
    one dataset, the usual comparison, read none)."""
    order = {k: i for i, k in enumerate(keys)}
    source = _questions_files(session, {run_of(k) for k in keys})
    lowest: dict[str, dict[RunKey, int]] = {}
    for key, qid, _, _, low in rows:
        if low is not None:
            lowest.setdefault(qid, {})[key] = low
    pairs: list[tuple[str, RunKey, RunKey]] = []
    for qid, by_key in lowest.items():
        against, *others = sorted(by_key, key=order.__getitem__)
        same = source.get(run_of(against))
        pairs += [(qid, k, against) for k in others if not same or source.get(run_of(k)) != same]
    asked = _asked(session, {lowest[q][k] for q, *sides in pairs for k in sides})
    apart = []
    for qid, key, against in pairs:
        db_a, question_a = asked[lowest[qid][against]]
        db_id, question = asked[lowest[qid][key]]
        if _asks_another(db_id, question, db_a, question_a):
            apart.append(IdApart(qid, key, question, against, question_a))
    return apart


def _questions_files(session: Session, run_ids: set[int]) -> dict[int, str]:
    """The questions file each run was played (or imported) on, where its spec names one."""
    stmt = select(Run.id, Run.spec).where(Run.id.in_(sorted(run_ids)))
    files = {}
    for run_id, spec in session.execute(stmt):
        if path := (spec or {}).get("questions_path"):
            files[int(run_id)] = str(path)
    return files


def _asked(session: Session, episode_ids: set[int]) -> dict[int, tuple[str | None, str]]:
    """These episodes' database and question, by primary key."""
    ids = sorted(episode_ids)
    asked: dict[int, tuple[str | None, str]] = {}
    for at in range(0, len(ids), _IN_CHUNK):
        stmt = select(Episode.id, Episode.db_id, Episode.question).where(
            Episode.id.in_(ids[at : at + _IN_CHUNK])
        )
        for eid, db_id, question in session.connection().execute(stmt):
            asked[eid] = (db_id, question)
    return asked


def _asks_another(db_a: str | None, text_a: str, db_b: str | None, text_b: str) -> bool:
    """Whether two episodes ask different questions: both name a database and they differ, or
    their texts differ and neither holds the other (an import may keep a whole prompt around
    the question)."""
    if db_a is not None and db_b is not None and db_a != db_b:
        return True
    if text_a == text_b:  # most shared ids: no need to normalise
        return False
    a, b = _normalised(text_a), _normalised(text_b)
    return a not in b and b not in a


def _normalised(text: str) -> str:
    """The text as two copies of one question may differ: in case and spacing."""
    return " ".join(text.casefold().split())


def outcome_matrix(session: Session, keys: Sequence[RunKey]) -> OutcomeMatrix:
    """Episode and correct counts of every question any of the runs (or training steps of
    runs) finished, per run; a run's counts of an id under which it asks another question
    than the first run that played it are a row of their own (`compare_outcomes_apart`).

    One GROUP BY on the (run_id, question_id, outcome, reward) index for the runs (and one on
    the training index for each step): 10 runs x 5,000 questions is 50,000 small rows.
    """
    keys = list(dict.fromkeys(keys))
    col = {k: j for j, k in enumerate(keys)}
    if not keys:
        return OutcomeMatrix(keys, [], [], [])
    rows = _counts_by_question(session, keys, lowest=True)
    apart = _ids_apart(session, keys, rows)
    own_row = {(a.key, a.question_id): f"{a.question_id} · {_side_name(a.key)}" for a in apart}
    index: dict[str, int] = {}
    episodes: list[list[int]] = []
    correct: list[list[int]] = []
    width = len(keys)
    with collector_paused():
        for key, qid, n, n_correct, _ in rows:
            label = own_row.get((key, qid), qid)
            if label not in index:
                index[label] = len(episodes)
                episodes.append([0] * width)
                correct.append([0] * width)
            episodes[index[label]][col[key]] = n
            correct[index[label]][col[key]] = n_correct
    asked = {label: qid for (_, qid), label in own_row.items()}
    return OutcomeMatrix(keys, list(index), episodes, correct, apart, asked)


def _side_name(key: RunKey) -> str:
    """A side as a row of its own names it: `run 7`, `run 7 @ step 200`."""
    return f"run {key.run_id} @ step {key.train_step}" if isinstance(key, RunStep) else f"run {key}"


def _next_question_ids(
    session: Session, keys: list[RunKey], after: str | None, n: int
) -> list[str]:
    """The first n question ids after `after` that any run (or step) finished, in the
    database's order.

    Each key contributes its own first n from the (run_id, question_id, ...) index (the
    training step index for a step), a short range scan, instead of grouping every episode of
    the runs; the union is ordered in SQL so the keyset follows the database's collation.
    """
    parts = []
    for i, key in enumerate(keys):
        later = [] if after is None else [Episode.question_id > after]
        src = _finished_of(key, f"side_{i}", *later)
        part = select(src.c.question_id).distinct().order_by(src.c.question_id).limit(n)
        parts.append(select(part.subquery().c.question_id))
    merged = union(*parts).subquery()
    stmt = select(merged.c.question_id).order_by(merged.c.question_id).limit(n)
    return list(session.scalars(stmt))


def distributions(session: Session, keys: Sequence[RunKey]) -> list[Distribution]:
    """Action mix, reward and steps histograms and outcome counts, one per requested run (or
    training step of a run).

    A run's come from the counts the write path keeps (`storage.run_totals`): a few rows per
    run, however many episodes it has. A training step's are counted from its episodes, as
    the write path counts them.
    """
    keys = list(dict.fromkeys(keys))
    if not keys:
        return []
    runs = [k for k in keys if not isinstance(k, RunStep)]
    counts: dict[RunKey, dict[str, dict[str, int]]] = {k: {} for k in keys}
    if runs:
        for run_id, kind, key, n in session.execute(
            select(RunCount.run_id, RunCount.kind, RunCount.key, RunCount.n).where(
                RunCount.run_id.in_(runs), RunCount.n > 0
            )
        ):
            counts[run_id].setdefault(kind, {})[key] = int(n)
    for k in keys:
        if isinstance(k, RunStep):
            change = counted(session.connection(), _episodes_of(k))
            for (kind, key), n in change.counts.items():
                if n > 0:
                    counts[k].setdefault(kind, {})[key] = n
    return [_distribution(k, counts[k]) for k in keys]


def _distribution(key: RunKey, counts: dict[str, dict[str, int]]) -> Distribution:
    actions = {a: counts.get("action", {}).get(a, 0) for a in (*ACTION_KINDS, UNPARSED)}
    steps = sorted((int(k), n) for k, n in counts.get("steps", {}).items())
    outcomes = dict.fromkeys(OUTCOMES, 0) | counts.get("outcome", {})
    classes = dict.fromkeys(FAILURE_CLASSES, 0) | counts.get("class", {})
    return Distribution(
        run_of(key),
        actions,
        reward_bins(counts.get("reward", {})),
        steps,
        outcomes,
        classes,
        train_step=key.train_step if isinstance(key, RunStep) else None,
    )


def reward_bins(by_key: dict[str, int]) -> list[tuple[float, int]]:
    """(bin centre, count): each reward counted at its nearest multiple of 0.1 (halves up),
    from rewards counted in thousandths (integer arithmetic: no bin is lost to float error).
    One grid for every run, so a reward sits at the same place in each run's row."""
    bins: dict[int, int] = {}
    half = REWARD_BIN_THOUSANDTHS // 2
    for key, n in by_key.items():
        k = (int(key) + half) // REWARD_BIN_THOUSANDTHS
        bins[k] = bins.get(k, 0) + n
    return [(round(k * REWARD_BIN, 10), n) for k, n in sorted(bins.items())]
