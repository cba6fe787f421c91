"""Writing runs and iterations, and reading them back, on SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import socket
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeKey, IterationBatch, RunSpec
from storage.collector import collector_paused
from storage.engine import get_engine
from storage.lifecycle import HEARTBEAT_STALE_SECONDS, RunStateError
from storage.models import Episode, Run, RunCount, Step
from storage.read_models import EpisodeFilter
from storage.run_totals import COLUMNS as TOTALS
from storage.store import Store
from storage.writes import STEP_COLUMNS, merged, retry_locked
from tests.support.records import finish, play, spec, start, step


def _count(store: Store, model: type[object]) -> int:
    with Session(get_engine(store._url)) as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_roundtrip_over_several_iterations(store: Store) -> None:
    run_id = store.create_run(spec("ckpt-1000", checkpoint="/ckpt/1000"), episodes_planned=2)
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=[start("q1"), start("q1", 1)]))
    sink.write(IterationBatch(steps=[step("q1", 0, 1), step("q1", 1, 1, parsed=False)]))
    sink.write(
        IterationBatch(
            steps=[step("q1", 0, 2, action="ANSWER", done=True), step("q1", 1, 2, error="bad")],
            finished=[finish("q1", 0, "correct", 1.5, 2, duration=2.5)],
        )
    )

    run = store.get_run(run_id)
    assert run is not None
    assert (run.name, run.checkpoint, run.status, run.episodes_planned) == (
        "ckpt-1000", "/ckpt/1000", "running", 2,
    )  # fmt: skip
    assert RunSpec.from_stored(run.spec) == spec("ckpt-1000", checkpoint="/ckpt/1000")
    assert run.spec["environment"]["step_budget"] == 5
    assert run.created_at.tzinfo is UTC and run.heartbeat_at is not None
    assert run.heartbeat_at >= run.created_at
    assert (run.episodes_finished, run.correct, run.accuracy) == (1, 1, 1.0)

    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,), finished_only=False))
    assert [(e.sample_index, e.outcome, e.steps) for e in page.items] == [
        (0, "correct", 2),
        (1, None, 2),
    ]
    done, playing = page.items
    assert (done.has_unparsed, done.has_sql_error, playing.has_unparsed, playing.has_sql_error) == (
        False, False, True, True,
    )  # fmt: skip

    detail = store.get_episode(done.id)
    assert detail is not None
    assert [s.step_no for s in detail.steps] == [1, 2]
    assert detail.steps[1].action == "ANSWER" and detail.steps[1].done
    assert (detail.summary.reward, detail.summary.duration_seconds, detail.summary.answer) == (
        1.5, 2.5, "42",
    )  # fmt: skip
    assert (detail.gold_sql, detail.seed, detail.progress) == (
        "SELECT count(*) FROM t_q1",
        1000,
        0.25,
    )
    assert detail.run.id == run_id
    assert store.get_episode(10_000) is None


def _played(classified: bool) -> list[IterationBatch]:
    """Two episodes, one iteration a batch: q1 (a refused query, an unparsed step, an answer
    with a NUL) and q2, started and finished in the last iteration."""
    cls = "wrong_after_gold" if classified else None
    return [
        IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1, error="no such column")]),
        IterationBatch(steps=[step("q1", 0, 2, action="DESCRIBE", parsed=False)]),
        IterationBatch(
            started=[start("q2")],
            steps=[step("q1", 0, 3, action="ANSWER", done=True), step("q2", 0, 1, done=True)],
            finished=[
                finish("q1", 0, "wrong", -0.5, 3, failure_class=cls, answer="4\x002"),
                finish("q2", 0, "error", 0.0, 1, failure_class="env_error" if cls else None),
            ],
        ),
    ]


def _episode_rows(store: Store, run_id: int) -> list[tuple[object, ...]]:
    """The run's episodes, every column but the ids and the write times."""
    table = Episode.__table__
    columns = [c for c in table.c if c.name not in ("id", "run_id", "started_at", "ended_at")]
    with Session(get_engine(store._url)) as s:
        rows = s.execute(select(*columns).where(table.c.run_id == run_id)).all()
    return sorted(tuple(r) for r in rows)


def _run_numbers(store: Store, run_id: int) -> tuple[object, ...]:
    with Session(get_engine(store._url)) as s:
        totals = s.execute(select(*(Run.__table__.c[c] for c in TOTALS)).where(Run.id == run_id))
        counts = s.execute(
            select(RunCount.kind, RunCount.key, RunCount.n).where(RunCount.run_id == run_id)
        )
        return tuple(totals.one()), sorted(tuple(c) for c in counts)


@pytest.mark.parametrize("classified", [True, False], ids=["classified", "store-classified"])
def test_an_episode_written_in_one_batch_is_stored_as_one_written_over_several(
    store: Store, classified: bool
) -> None:
    """A grouping sink hands most episodes over started, played and finished in one batch, and
    those are inserted whole; their rows, and the run's numbers, are what the same episodes
    written an iteration a transaction give."""
    batches = _played(classified)
    each = store.create_run(spec("each"), episodes_planned=2)
    for batch in batches:
        store.sink(each).write(batch)  # a new sink each time: ids looked up, not remembered
    whole = store.create_run(spec("whole"), episodes_planned=2)
    store.sink(whole).write(merged(batches))
    rows = _episode_rows(store, whole)
    assert rows == _episode_rows(store, each)
    assert _run_numbers(store, whole) == _run_numbers(store, each)
    done = store.list_episodes(EpisodeFilter(run_ids=(whole,))).items
    assert [
        (e.question_id, e.steps, e.failure_class, e.has_sql_error, e.has_unparsed) for e in done
    ] == [
        ("q1", 3, "wrong_after_gold", True, True),
        ("q2", 1, "env_error", False, False),
    ]
    detail = store.get_episode(done[0].id)
    assert detail is not None and detail.summary.answer == "4\ufffd2"
    with Session(get_engine(store._url)) as s:
        ended = s.scalars(select(Episode.ended_at).where(Episode.run_id == whole)).all()
    assert len(ended) == 2 and None not in ended


def test_a_resumed_episode_played_in_one_batch_replaces_the_unfinished_one(store: Store) -> None:
    """Resume starts an unfinished episode again: the earlier attempt's row and steps go, and
    the run's numbers lose them, when the new attempt is inserted whole too."""
    run_id = store.create_run(spec(), episodes_planned=1)
    first = _played(classified=True)
    store.sink(run_id).write(merged(first[:2]))  # q1 started, two steps, then the process died
    resumed = Store(store.url).sink(run_id)
    resumed.write(merged(first))
    again = store.create_run(spec("again"), episodes_planned=1)
    store.sink(again).write(merged(first))
    assert _episode_rows(store, run_id) == _episode_rows(store, again)
    assert _run_numbers(store, run_id) == _run_numbers(store, again)
    assert _count(store, Step) == 8  # q1's three steps and q2's one, in each run


def test_store_write_without_a_sink_uses_the_same_path(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id).write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    # A different Store object (another process, say) finishes the episode it never started.
    other = Store(store.url)
    other.sink(run_id).write(IterationBatch(finished=[finish("q1", 0, "wrong", 0.0, 1)]))
    assert store.finished_keys(run_id) == {EpisodeKey("q1", 0)}


def test_failing_batch_leaves_nothing(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=3)
    store.sink(run_id).write(play("q0", 0, "correct", 1.0, 1))
    before = (_count(store, Episode), _count(store, Step))
    # The unknown outcome violates the CHECK constraint after the episodes and steps went in.
    bad = IterationBatch(
        started=[start("q1"), start("q2")],
        steps=[step("q1", 0, 1), step("q2", 0, 1)],
        finished=[finish("q1", 0, "nonsense", 0.0, 1)],  # type: ignore[arg-type]
    )
    sink = store.sink(run_id)
    with pytest.raises(IntegrityError):
        sink.write(bad)
    assert (_count(store, Episode), _count(store, Step)) == before
    # The sink forgot nothing it should not have: the same episodes start cleanly afterwards.
    sink.write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    sink.write(IterationBatch(finished=[finish("q1", 0, "correct", 1.0, 1)]))
    assert store.finished_keys(run_id) == {EpisodeKey("q0", 0), EpisodeKey("q1", 0)}


def test_duplicate_step_rolls_back_the_whole_batch(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id).write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    with pytest.raises(IntegrityError):
        store.sink(run_id).write(
            IterationBatch(
                steps=[step("q1", 0, 2), step("q1", 0, 1)],
                finished=[finish("q1", 0, "correct", 1.0, 2)],
            ),
        )
    assert _count(store, Step) == 1
    assert store.finished_keys(run_id) == set()


def test_steps_for_an_unstarted_episode_are_refused(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    with pytest.raises(ValueError, match=r"no started episode q9#0"):
        store.sink(run_id).write(IterationBatch(steps=[step("q9", 0, 1)]))


def test_writing_to_a_missing_run_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="no run with id 404 in this store"):
        store.sink(404).write(IterationBatch(started=[start("q1")]))


def test_retry_locked_retries_only_lock_errors() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))
        return "done"

    assert retry_locked(flaky) == "done" and len(calls) == 3

    def broken() -> str:
        calls.append(1)
        raise OperationalError("SELECT", {}, Exception("no such table: runs"))

    calls.clear()
    with pytest.raises(OperationalError, match="no such table"):
        retry_locked(broken)
    assert len(calls) == 1


def test_a_step_row_names_every_column_of_the_steps_table() -> None:
    """Step rows go to the driver as values: a column left out would be stored as NULL."""
    assert list(STEP_COLUMNS) == [c.name for c in Step.__table__.columns if c.name != "id"]


def test_a_steps_numbers_of_any_numeric_type_are_stored_as_reals(store: Store) -> None:
    """A policy may hand numpy scalars or ints where a step has floats: stored as reals."""
    run_id = store.create_run(spec(), episodes_planned=1)
    numpy_step = replace(
        step("q1", 0, 1), reward=np.float32(0.5), policy_seconds=np.float64(0.25), env_seconds=2
    )
    store.sink(run_id).write(IterationBatch(started=[start("q1")], steps=[numpy_step]))
    with Session(get_engine(store._url)) as s:
        row = s.execute(select(Step.reward, Step.policy_seconds, Step.env_seconds)).one()
    assert tuple(row) == (0.5, 0.25, 2.0)
    assert all(type(v) is float for v in row)
    if store.dialect == "sqlite":
        assert store._url.database
        with closing(sqlite3.connect(store._url.database)) as raw:
            kinds = raw.execute(
                "SELECT typeof(reward), typeof(policy_seconds), typeof(env_seconds) FROM steps"
            ).fetchone()
        assert kinds == ("real", "real", "real")


def test_a_write_pauses_the_cyclic_collector_and_restores_it(store: Store) -> None:
    """The collector is off while a batch is written, and found as it was after."""
    seen: list[bool] = []
    run_id = store.create_run(spec("gc"), episodes_planned=1)
    sink = store.sink(run_id)
    real = sink._prompts.encode

    def encode(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    sink._prompts.encode = encode  # type: ignore[method-assign]
    assert gc.isenabled()
    sink.write(IterationBatch(started=[start("q1")], steps=[step("q1", 0, 1)]))
    assert seen == [False] and gc.isenabled()
    try:
        gc.disable()  # a caller that runs with the collector off keeps it off
        with pytest.raises(RuntimeError), collector_paused():
            raise RuntimeError("the write failed")
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the write failed")
    assert gc.isenabled()


def test_write_waits_for_another_writer(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "busy.db"))
    run_id = store.create_run(spec(), episodes_planned=1)
    other = sqlite3.connect(tmp_path / "busy.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock ...
    released = threading.Timer(0.3, other.execute, args=("COMMIT",))
    released.start()  # ... for a moment
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    released.join()
    other.close()
    assert store.finished_keys(run_id) == {EpisodeKey("q1", 0)}


def test_resume_replays_unfinished_episodes(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=2)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    store.sink(run_id).write(IterationBatch(started=[start("q2")], steps=[step("q2", 0, 1)]))
    # A new process resumes: q1 is done, q2 starts again from scratch.
    resumed = Store(store.url).sink(run_id)
    with pytest.raises(ValueError, match="already has a finished episode"):
        resumed.write(IterationBatch(started=[start("q1")]))
    resumed.write(play("q2", 0, "wrong", 0.0, 3))
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,)))
    assert [(e.question_id, e.steps, e.outcome) for e in page.items] == [
        ("q1", 2, "correct"),
        ("q2", 3, "wrong"),
    ]


def test_delete_unfinished_episodes_and_runs(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=2)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    store.sink(run_id).write(IterationBatch(started=[start("q2")], steps=[step("q2", 0, 1)]))
    assert store.delete_unfinished_episodes(run_id) == 1
    assert (_count(store, Episode), _count(store, Step)) == (1, 2)
    assert store.delete_run(run_id) is True
    assert (_count(store, Run), _count(store, Episode), _count(store, Step)) == (0, 0, 0)
    assert store.delete_run(run_id) is False


def test_unique_run_name(store: Store) -> None:
    store.create_run(spec("same"), episodes_planned=1)
    with pytest.raises(ValueError, match="a run named 'same' already exists"):
        store.create_run(spec("same"), episodes_planned=1)
    assert [r.name for r in store.list_runs()] == ["same"]


def test_nul_characters_in_a_run(store: Store) -> None:
    """PostgreSQL text and JSON cannot hold NUL: a name is refused, other text is mapped."""
    with pytest.raises(ValueError, match="NUL character"):
        store.create_run(spec("bad\x00name"), episodes_planned=1)
    # Past its column's width: PostgreSQL refused it, SQLite kept it (a Recorder's run= did).
    with pytest.raises(ValueError, match=r"^the run name is 201 characters long; the store keeps"):
        store.create_run(spec("n" * 201), episodes_planned=1)
    assert store.list_runs() == []
    with_nul = replace(spec("ok"), generation={"stop": ["a\x00b"]}, checkpoint="/ck\x00pt")
    run_id = store.create_run(with_nul, episodes_planned=1)
    run = store.get_run(run_id)
    assert run is not None
    assert run.spec["generation"] == {"stop": ["a\ufffdb"]}
    assert run.checkpoint == "/ck\ufffdpt"


def test_status_transitions(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1, status="queued")
    queued = store.get_run(run_id)
    assert queued is not None
    assert (queued.status, queued.started_at, queued.heartbeat_at) == ("queued", None, None)
    store.set_run_status(run_id, "running")
    running = store.get_run(run_id)
    assert running is not None and running.started_at is not None and running.ended_at is None
    store.set_run_status(run_id, "failed", error="CUDA out of memory")
    failed = store.get_run(run_id)
    assert failed is not None
    assert (failed.status, failed.error) == ("failed", "CUDA out of memory")
    assert failed.ended_at is not None and failed.duration_seconds is not None
    with pytest.raises(ValueError, match="unknown run status 'paused'"):
        store.set_run_status(run_id, "paused")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no run with id 999"):
        store.set_run_status(999, "completed")


def test_run_tags(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    store.tag_run(run_id, "sweep", "lr-3e-5")
    store.tag_run(run_id, "difficulty", "hard")
    store.tag_run(run_id, "sweep", "lr-1e-5")
    assert store.run_tags(run_id) == {"difficulty": "hard", "sweep": "lr-1e-5"}
    with pytest.raises(ValueError, match="no run with id 999"):
        store.tag_run(999, "a", "b")
    store.delete_run(run_id)
    assert store.run_tags(run_id) == {}


def test_find_run_by_name_or_id(store: Store) -> None:
    run_id = store.create_run(spec("ckpt-2000"), episodes_planned=1)
    by_name, by_id = store.find_run("ckpt-2000"), store.find_run(str(run_id))
    assert by_name is not None and by_id is not None and by_name.id == by_id.id == run_id
    assert store.find_run("nope") is None


def test_list_runs_newest_first_with_limit(store: Store) -> None:
    ids = [store.create_run(spec(f"r{i}"), episodes_planned=1) for i in range(3)]
    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert [r.id for r in store.list_runs(limit=2)] == ids[:0:-1]


def test_run_on_another_host_reads_interrupted_once_its_heartbeat_is_stale(store: Store) -> None:
    store.create_run(spec("fresh"), episodes_planned=1)
    stale = store.create_run(spec("stale"), episodes_planned=1)
    done = store.create_run(spec("done"), episodes_planned=1)
    store.set_run_status(done, "completed")
    past = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_STALE_SECONDS + 60)
    with Session(get_engine(store._url)) as s, s.begin():
        # Elsewhere, only the heartbeat can tell whether the process lives.
        s.execute(update(Run).values(host="another-machine"))
        s.execute(update(Run).where(Run.id.in_([stale, done])).values(heartbeat_at=past))
    statuses = {r.name: r.status for r in store.list_runs()}
    assert statuses == {"fresh": "running", "stale": "interrupted", "done": "completed"}
    # Reads compute it; nothing is written.
    with Session(get_engine(store._url)) as s:
        assert s.scalar(select(Run.status).where(Run.id == stale)) == "running"
    # Every write is a heartbeat.
    store.sink(stale).write(IterationBatch(started=[start("q1")]))
    stale_run = store.get_run(stale)
    assert stale_run is not None and stale_run.status == "running"


def test_run_whose_process_died_on_this_host_reads_interrupted_at_once(store: Store) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_id = store.create_run(spec("killed"), episodes_planned=1)
    with Session(get_engine(store._url)) as s, s.begin():
        s.execute(update(Run).where(Run.id == run_id).values(pid=dead.pid))
    run = store.get_run(run_id)
    assert run is not None and run.status == "interrupted"  # heartbeat still fresh
    alive = store.create_run(spec("alive"), episodes_planned=1)  # this process
    assert (r := store.get_run(alive)) is not None and r.status == "running"


def test_taking_over_a_run_another_live_process_plays_names_that_process(store: Store) -> None:
    player = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run_id = store.create_run(spec("busy"), episodes_planned=1)
        with Session(get_engine(store._url)) as s, s.begin():
            s.execute(update(Run).where(Run.id == run_id).values(pid=player.pid))
        with pytest.raises(RunStateError) as refused:
            store.set_run_status(run_id, "running")
        assert str(refused.value) == (
            f"run 'busy' is already running (process {player.pid} on {socket.gethostname()}); "
            "wait for it to end or stop it, then try again"
        )
    finally:
        player.kill()
        player.wait()
