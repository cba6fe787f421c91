"""Several processes writing one SQLite store at once lose nothing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_core.records import IterationBatch
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support.records import finish, spec, start, step

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier

ITERATIONS = 30
PER_ITERATION = 3  # episodes started and finished per iteration, 2 steps each


def _worker(url: str, run_id: int, worker: int, barrier: Barrier) -> None:
    store = Store(url)  # this process's own engine
    sink = store.sink(run_id)
    barrier.wait()
    for it in range(ITERATIONS):
        qs = [f"w{worker}-i{it}-e{e}" for e in range(PER_ITERATION)]
        sink.write(
            IterationBatch(started=[start(q) for q in qs], steps=[step(q, 0, 1) for q in qs])
        )
        sink.write(
            IterationBatch(
                steps=[step(q, 0, 2, action="ANSWER", done=True) for q in qs],
                finished=[finish(q, 0, "correct", 1.0, 2) for q in qs],
            )
        )
    store.close()


def test_two_processes_write_one_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = Store(url)
    run_id = store.create_run(spec(), episodes_planned=2 * ITERATIONS * PER_ITERATION)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_worker, args=(url, run_id, w, barrier)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    run = store.get_run(run_id)
    assert run is not None
    assert (run.episodes_finished, run.correct) == (2 * ITERATIONS * PER_ITERATION,) * 2
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=1000, with_total=True)
    assert page.total == 2 * ITERATIONS * PER_ITERATION
    assert all(e.steps == 2 for e in page.items)
    assert len({e.question_id for e in page.items}) == 2 * ITERATIONS * PER_ITERATION
