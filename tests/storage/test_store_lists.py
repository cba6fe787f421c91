"""The episode list: keyset paging in every sort order, and every filter."""

from __future__ import annotations

import base64
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event

from rollout_core.records import OUTCOMES, IterationBatch, Outcome
from storage.read_models import EpisodeFilter, EpisodeSort
from storage.store import Store
from tests.support.records import play, spec, start, step

REWARDS = [0.0, 0.5, 1.0, 0.5, -0.2]
# None: a finished episode nobody timed (an imported rollout).
DURATIONS = [1.0, 2.0, 1.0, None]
DBS = ["concert_singer", "pets_1"]


@dataclass
class Truth:
    """What the fixture wrote for one episode, to compute expected lists in Python."""

    id: int
    run_id: int
    question_id: str
    sample_index: int
    db_id: str
    question: str
    outcome: str | None
    reward: float | None
    steps: int
    duration: float | None
    has_sql_error: bool
    has_unparsed: bool
    raw: str
    train_step: int | None = None


@pytest.fixture
def filled(store: Store) -> tuple[Store, int, int, list[Truth]]:
    """Run A: 30 finished episodes full of ties, 4 unfinished; run B: 10 finished."""
    a = store.create_run(spec("run-a"), episodes_planned=34)
    b = store.create_run(spec("run-b"), episodes_planned=10)
    rows: list[dict[str, Any]] = []
    for i in range(30):
        n_steps = 1 + i % 4
        row: dict[str, Any] = {
            "run_id": a, "question_id": f"q{i // 3:02d}", "sample_index": i % 3,
            "db_id": DBS[i % 2], "outcome": OUTCOMES[i % 4], "reward": REWARDS[i % 5],
            "steps": n_steps, "duration": DURATIONS[i % 4],
            "has_unparsed": i % 6 == 0 and n_steps > 1,
            "has_sql_error": i % 5 == 1 and n_steps > 1,
            "raw": "the NeEdLe here" if i == 7 else "",
        }  # fmt: skip
        batch = play(
            row["question_id"], row["sample_index"], row["outcome"], row["reward"], n_steps,
            unparsed=int(row["has_unparsed"]), sql_errors=int(row["has_sql_error"]),
            duration=row["duration"], db_id=row["db_id"], raw=row["raw"],
        )  # fmt: skip
        if i == 11:  # a literal % in a question, for the LIKE escaping
            t = "Is it 100% sure?"
            batch = IterationBatch(
                started=[
                    start(row["question_id"], row["sample_index"], db_id=row["db_id"], text=t)
                ],
                steps=batch.steps,
                finished=batch.finished,
            )
        store.sink(a).write(batch)
        rows.append(row)
    for i in range(4):
        q = f"q{20 + i}"
        store.sink(a).write(
            IterationBatch(started=[start(q)], steps=[step(q, 0, 1, parsed=i != 0)])
        )
        rows.append(
            {"run_id": a, "question_id": q, "sample_index": 0, "db_id": "concert_singer",
             "outcome": None, "reward": None, "steps": 1, "duration": None,
             "has_unparsed": i == 0, "has_sql_error": False, "raw": ""}
        )  # fmt: skip
    for i in range(10):  # a training run: three questions a training step
        q = f"q{i:02d}"
        outcome: Outcome = "correct" if i % 2 else "wrong"
        batch = play(q, 0, outcome, i / 10, 2, db_id="pets_1")
        trained = [dataclasses.replace(batch.started[0], train_step=i // 3)]
        store.sink(b).write(dataclasses.replace(batch, started=trained))
        rows.append(
            {"run_id": b, "question_id": q, "sample_index": 0, "db_id": "pets_1",
             "outcome": outcome, "reward": i / 10, "steps": 2, "duration": 1.0,
             "has_unparsed": False, "has_sql_error": False, "raw": "", "train_step": i // 3}
        )  # fmt: skip
    listed = store.list_episodes(EpisodeFilter(finished_only=False), limit=1000).items
    by_key = {(e.run_id, e.question_id, e.sample_index): e for e in listed}
    truths = []
    for r in rows:
        e = by_key[(r["run_id"], r["question_id"], r["sample_index"])]
        truths.append(Truth(id=e.id, question=e.question, **r))
    return store, a, b, truths


def _page_all(
    store: Store, flt: EpisodeFilter, sort: EpisodeSort, desc: bool, limit: int
) -> list[int]:
    ids: list[int] = []
    cursor = None
    for _ in range(1000):
        page = store.list_episodes(flt, sort=sort, descending=desc, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        ids += [e.id for e in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return ids
        assert page.items, "a page with a next cursor must not be empty"
    raise AssertionError("paging did not end")


_KEYS = {"id": None, "reward": "reward", "steps": "steps", "duration": "duration",
         "question_id": "question_id"}  # fmt: skip


def _expected(truths: list[Truth], sort: EpisodeSort, desc: bool) -> list[int]:
    attr = _KEYS[sort]

    def key(t: Truth) -> tuple[Any, ...]:
        value = t.id if attr is None else getattr(t, attr)
        return (value is None, value if value is not None else 0, t.id)

    return [t.id for t in sorted(truths, key=key, reverse=desc)]


SORTS: tuple[EpisodeSort, ...] = ("id", "reward", "steps", "duration", "question_id")


def test_keyset_paging_visits_every_row_once_in_order(
    filled: tuple[Store, int, int, list[Truth]],
) -> None:
    store, a, _b, truths = filled
    # Each sort, both directions, with and without unfinished (NULL reward/duration) rows.
    for sort, desc, finished_only, limit in itertools.product(
        SORTS, (False, True), (True, False), (1, 7)
    ):
        flt = EpisodeFilter(run_ids=(a,), finished_only=finished_only)
        rows = [t for t in truths if t.run_id == a and (t.outcome or not finished_only)]
        got = _page_all(store, flt, sort, desc, limit)
        assert got == _expected(rows, sort, desc), (sort, desc, finished_only, limit)
        assert len(set(got)) == len(rows)


def test_paging_across_runs(filled: tuple[Store, int, int, list[Truth]]) -> None:
    store, _a, _b, truths = filled
    finished = [t for t in truths if t.outcome is not None]
    got = _page_all(store, EpisodeFilter(), "reward", True, 4)
    assert got == _expected(finished, "reward", True)


def test_the_page_limit_is_a_number_in_the_sql(
    filled: tuple[Store, int, int, list[Truth]],
) -> None:
    """SQLite keeps only the first rows of a sort for `LIMIT 5`, not for `LIMIT ?`
    (`storage.sql_limits`); the limit changes from call to call and is still rendered."""
    store, _a, _b, _truths = filled
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    engine = store._engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        for limit in (4, 9):
            page = store.list_episodes(EpisodeFilter(), sort="reward", descending=True, limit=limit)
            assert len(page.items) == limit
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    listed = [s for s in statements if "ORDER BY episodes.reward DESC" in s]
    assert len(listed) == 2
    assert "LIMIT 5" in listed[0] and "LIMIT 10" in listed[1], listed


def _check(
    store: Store, truths: list[Truth], flt: EpisodeFilter, want: list[Truth], at_least: int = 1
) -> None:
    assert len(want) >= at_least, "the fixture must exercise this filter"
    page = store.list_episodes(flt, limit=1000, with_total=True)
    assert sorted((e.id, e.train_step) for e in page.items) == sorted(
        (t.id, t.train_step) for t in want
    )
    assert page.total == len(want)


def test_every_filter(filled: tuple[Store, int, int, list[Truth]]) -> None:
    store, a, b, truths = filled
    fin = [t for t in truths if t.outcome is not None]
    cases: list[tuple[EpisodeFilter, list[Truth]]] = [
        (EpisodeFilter(), fin),
        (EpisodeFilter(finished_only=False), truths),
        (EpisodeFilter(run_ids=(b,)), [t for t in fin if t.run_id == b]),
        (EpisodeFilter(run_ids=(a, b)), fin),
        (EpisodeFilter(outcomes=("correct",)), [t for t in fin if t.outcome == "correct"]),
        (
            EpisodeFilter(outcomes=("wrong", "error")),
            [t for t in fin if t.outcome in ("wrong", "error")],
        ),
        (EpisodeFilter(db_ids=("pets_1",)), [t for t in fin if t.db_id == "pets_1"]),
        (EpisodeFilter(question_id="q03"), [t for t in fin if t.question_id == "q03"]),
        (EpisodeFilter(min_reward=0.5), [t for t in fin if (t.reward or 0) >= 0.5]),
        (EpisodeFilter(max_reward=0.0), [t for t in fin if (t.reward or 0) <= 0.0]),
        (
            EpisodeFilter(min_reward=0.1, max_reward=0.5),
            [t for t in fin if 0.1 <= (t.reward or 0) <= 0.5],
        ),
        (EpisodeFilter(min_steps=3), [t for t in fin if t.steps >= 3]),
        (EpisodeFilter(max_steps=1), [t for t in fin if t.steps <= 1]),
        # A training step range leaves out the episodes with none (run A's).
        (EpisodeFilter(min_train_step=2), [t for t in fin if (t.train_step or -1) >= 2]),
        (EpisodeFilter(max_train_step=0), [t for t in fin if t.train_step == 0]),
        (
            EpisodeFilter(min_train_step=1, max_train_step=2),
            [t for t in fin if t.train_step in (1, 2)],
        ),
        (EpisodeFilter(has_sql_error=True), [t for t in fin if t.has_sql_error]),
        (EpisodeFilter(has_sql_error=False), [t for t in fin if not t.has_sql_error]),
        (EpisodeFilter(has_unparsed=True), [t for t in fin if t.has_unparsed]),
        (
            EpisodeFilter(has_unparsed=True, finished_only=False),
            [t for t in truths if t.has_unparsed],
        ),
        (EpisodeFilter(has_unparsed=False), [t for t in fin if not t.has_unparsed]),
        # Text: model output (case-insensitive), question, gold SQL, and LIKE's wildcards.
        (EpisodeFilter(text="needle"), [t for t in fin if "needle" in t.raw.lower()]),
        (EpisodeFilter(text="100%"), [t for t in fin if "100%" in t.question]),
        (EpisodeFilter(text="100_"), []),
        (EpisodeFilter(text="ROWS FOR Q04"), [t for t in fin if t.question_id == "q04"]),
        (
            EpisodeFilter(text="from t_q05"),
            [t for t in fin if t.question_id == "q05"],
        ),
        (
            EpisodeFilter(
                run_ids=(a,),
                outcomes=("correct",),
                db_ids=("concert_singer",),
                min_steps=1,
                max_reward=1.0,
            ),
            [
                t
                for t in fin
                if t.run_id == a
                and t.outcome == "correct"
                and t.db_id == "concert_singer"
                and (t.reward or 0) <= 1.0
            ],
        ),
    ]
    for flt, want in cases:
        _check(store, truths, flt, want, at_least=0 if flt.text == "100_" else 1)


def test_a_capped_count_stops_at_the_cap_and_says_so(
    filled: tuple[Store, int, int, list[Truth]],
) -> None:
    store, _a, _b, truths = filled
    flt = EpisodeFilter(finished_only=False)
    assert len(truths) > 3
    capped = store.list_episodes(flt, limit=2, with_total=True, total_cap=3)
    assert (capped.total, capped.total_capped) == (3, True)
    assert len(capped.items) == 2
    whole = store.list_episodes(flt, limit=2, with_total=True, total_cap=len(truths))
    assert (whole.total, whole.total_capped) == (len(truths), False)


def test_summary_fields(filled: tuple[Store, int, int, list[Truth]]) -> None:
    store, a, _b, truths = filled
    page = store.list_episodes(EpisodeFilter(run_ids=(a,), finished_only=False), limit=1000)
    by_id = {t.id: t for t in truths}
    for e in page.items:
        t = by_id[e.id]
        assert (e.run_name, e.db_id, e.outcome, e.reward, e.steps, e.duration_seconds) == (
            "run-a", t.db_id, t.outcome, t.reward, t.steps, t.duration,
        )  # fmt: skip
        assert (e.has_sql_error, e.has_unparsed) == (t.has_sql_error, t.has_unparsed)


def test_cursor_errors(filled: tuple[Store, int, int, list[Truth]]) -> None:
    store, a, _b, _truths = filled
    flt = EpisodeFilter(run_ids=(a,))
    page = store.list_episodes(flt, sort="reward", limit=2)
    assert page.next_cursor is not None
    with pytest.raises(ValueError, match="page cursor was made for sort='reward'"):
        store.list_episodes(flt, sort="steps", cursor=page.next_cursor)
    with pytest.raises(ValueError, match="invalid page cursor"):
        store.list_episodes(flt, cursor="not-a-cursor!")
    deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()  # past json's stack
    with pytest.raises(ValueError, match="invalid page cursor"):
        store.list_episodes(flt, cursor=deep)
    with pytest.raises(ValueError, match="unknown episode sort 'name'"):
        store.list_episodes(flt, sort="name")  # type: ignore[arg-type]
