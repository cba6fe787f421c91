"""A step's argument and error as spans of its output and observation: written, read back,
classified from, and migrated both ways (revision 0009), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine

from rollout_core.records import IterationBatch, StepRecord
from storage.classify import Finished, _step_facts, classify_stored
from storage.read_models import EpisodeFilter
from storage.step_spans import argument_columns, error_columns, resolved, span_of
from storage.store import Store
from tests.storage.prompt_checks import as_stored
from tests.storage.store_builders import finish, spec, start, step
from tests.storage.store_files import downgrade_to
from tests.storage.test_migration_prompts import _runner_batches

# Characters of one, two, three and four UTF-8 bytes before the argument: a span counts
# characters, in Python and in both databases' substr.
_WIDE = "é中😀"
_LOOP = "SELECT name FROM singer WHERE 😀 = 'ß'"


def _odd_steps(q: str) -> list[StepRecord]:
    raw = step(q, 0, 1)
    return [
        # The argument inside the output, after wide characters: a span; the error too.
        dataclasses.replace(
            raw, raw_output=f"{_WIDE} thinking\nQUERY {_LOOP}", argument=_LOOP,
            observation=f"Error: no such column: 😀 {_WIDE}", error="no such column: 😀",
        ),
        # The same action again (an action loop is read from equal arguments).
        dataclasses.replace(
            raw, step_no=2, raw_output=f"QUERY {_LOOP}", argument=_LOOP,
            observation="Error: no such column: 😀", error="no such column: 😀",
        ),
        # An argument the output does not hold as it is (the parser normalised it): whole.
        dataclasses.replace(
            raw, step_no=3, raw_output="QUERY   select  1", argument="select 1",
            observation="1 row",
        ),
        # Too short to be worth a span, with a NUL the store holds as U+FFFD.
        dataclasses.replace(
            raw, step_no=4, raw_output="DESCRIBE t\x00", action="DESCRIBE", argument="t\x00",
            observation="Error: b\x00d", error="b\x00d",
        ),
    ]  # fmt: skip


def _odd_batch(q: str = "q1") -> IterationBatch:
    return IterationBatch(
        started=[start(q)],
        steps=_odd_steps(q),
        finished=[finish(q, 0, "budget_exhausted", 0.0, 4)],
    )


def _stored_steps(store: Store, run_id: int) -> list[tuple[str, str | None]]:
    """(argument, error) of the run's steps as read, in the order they were written."""
    details = store.iter_episode_details(run_id, flt=EpisodeFilter(finished_only=False))
    steps = sorted((s for d in details for s in d.steps), key=lambda s: s.id)
    return [(s.argument, s.error) for s in steps]


def _raw_columns(url: str) -> list[tuple[object, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT argument, argument_start, argument_end, error, error_start, "
                    "error_end FROM steps ORDER BY id"
                )
            )
            return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def test_span_of_finds_texts_worth_a_span() -> None:
    assert span_of("QUERY SELECT 1", "SELECT 1") == (6, 14)
    assert span_of("QUERY SELECT 1", "SEL") is None  # shorter than a span is worth
    assert span_of("QUERY SELECT 1", "select 1") is None  # not in the source as it is
    assert span_of("Error: x", None) is None
    assert argument_columns("QUERY SELECT 1", "SELECT 1") == {
        "argument": "", "argument_start": 6, "argument_end": 14,
    }  # fmt: skip
    assert error_columns("ok", None) == {"error": None, "error_start": None, "error_end": None}
    assert resolved(f"{_WIDE}abcd", "", 3, 7) == "abcd"
    assert resolved("anything", "kept", None, None) == "kept"


def test_steps_read_back_their_argument_and_error_exactly(store: Store) -> None:
    run_id = store.create_run(spec("spans"), episodes_planned=1)
    batch = _odd_batch()
    store.sink(run_id).write(batch)
    expected = [(as_stored(s.argument), s.error and as_stored(s.error)) for s in batch.steps]
    assert _stored_steps(store, run_id) == expected
    # What the rows hold: spans where the source has the text, the text elsewhere.
    argument, arg_start, arg_end, error, err_start, err_end = zip(
        *_raw_columns(store.url), strict=True
    )
    assert argument == ("", "", "select 1", "t\ufffd")
    assert (arg_start[0], arg_end[0]) == (
        len(f"{_WIDE} thinking\nQUERY "),
        len(batch.steps[0].raw_output),
    )
    assert error == ("", "", None, "b\ufffdd")
    assert (err_start[0], err_end[0]) == (len("Error: "), len("Error: no such column: 😀"))
    assert err_start[2] is None and arg_start[3] is None


def test_the_classifier_reads_spanned_texts_in_sql(store: Store) -> None:
    run_id = store.create_run(spec("loop"), episodes_planned=1)
    batch = _odd_batch()
    store.sink(run_id).write(batch)
    [episode] = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    with store._engine.connect() as conn:
        facts = _step_facts(conn, [episode.id], spans=True)[episode.id]
        classes = classify_stored(conn, [Finished(episode.id, "budget_exhausted", 0.0)])
    assert [(f.argument, f.error) for f in facts] == [
        (as_stored(s.argument), s.error and as_stored(s.error)) for s in batch.steps
    ]
    assert classes == {episode.id: "sql_errors"}  # two of four QUERY steps refused


def test_0009_moves_texts_into_spans_and_back(store_url: str) -> None:
    store = Store(store_url)
    run_id = store.create_run(spec("runner"), episodes_planned=20)
    for batch in [*_runner_batches("random", samples=3, limit=12), _odd_batch("q-odd")]:
        store.sink(run_id).write(batch)
    before = _stored_steps(store, run_id)
    spanned = sum(row[2] is not None for row in _raw_columns(store_url))
    store.close()
    assert spanned > len(before) / 2 > 30

    downgrade_to(store_url, "0008")
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            texts = conn.execute(sa.text("SELECT argument, error FROM steps ORDER BY id")).all()
    finally:
        engine.dispose()
    assert [tuple(t) for t in texts] == before  # every text whole again

    store = Store(store_url)  # up to head again: the same spans, the same reads
    try:
        assert store.schema_upgrade is not None and store.schema_upgrade.before == "0008"
        assert _stored_steps(store, run_id) == before
        assert sum(row[2] is not None for row in _raw_columns(store_url)) == spanned
    finally:
        store.close()


# Any text a model or a database may produce, NUL included (surrogates cannot be UTF-8).
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@st.composite
def _step_texts(draw: st.DrawFn) -> tuple[str, str, str, str | None]:
    """(raw output, argument, observation, error): parts of their sources, or not."""
    raw = draw(_TEXT)
    lo, hi = sorted(draw(st.tuples(*[st.integers(0, len(raw))] * 2)))
    argument = draw(st.one_of(st.just(raw[lo:hi]), _TEXT))
    error = draw(st.one_of(st.none(), _TEXT))
    observation = f"Error: {error}{draw(_TEXT)}" if error and draw(st.booleans()) else draw(_TEXT)
    return raw, argument, observation, error


_RUN_NUMBERS = itertools.count()


@pytest.fixture(scope="module")
def spans_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store for every example (a run each): a new store a draw was most of the test's time."""
    store = Store(str(tmp_path_factory.mktemp("spans") / "s.db"))
    yield store
    store.close()


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_step_texts(), min_size=1, max_size=4))
def test_any_argument_and_error_read_back_exactly(
    texts: list[tuple[str, str, str, str | None]], spans_store: Store
) -> None:
    store = spans_store
    run_id = store.create_run(spec(f"any-{next(_RUN_NUMBERS)}"), episodes_planned=1)
    steps = [
        dataclasses.replace(
            step("q1", 0, n), raw_output=raw, argument=argument, observation=obs, error=error
        )
        for n, (raw, argument, obs, error) in enumerate(texts, start=1)
    ]
    store.sink(run_id).write(
        IterationBatch(
            started=[start("q1")],
            steps=steps,
            finished=[finish("q1", 0, "budget_exhausted", 0.0, len(steps))],
        )
    )
    expected = [(as_stored(s.argument), s.error and as_stored(s.error)) for s in steps]
    assert _stored_steps(store, run_id) == expected
    [episode] = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    with store._engine.connect() as conn:
        facts = _step_facts(conn, [episode.id], spans=True)[episode.id]
    assert [(f.argument, f.error) for f in facts] == expected  # the SQL reading agrees
