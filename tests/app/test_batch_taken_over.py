"""A run played here that a `--resume` on another machine took over while this process was
paused (its heartbeat stale): this process stops in one line and leaves the run as the other
set it, not `failed` under the other's feet."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from app import batch
from rollout_core.specs import RunRequest
from storage.store import Store
from tests.support.benchmark import make_benchmark
from tests.support.plain_sql import sql_rows


def test_a_run_taken_over_elsewhere_is_left_to_the_other_process(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store, elsewhere = Store(url), Store(url)
    request = RunRequest(
        policy="random", questions=str(questions), db_dir=str(db_dir), name="r", samples=8
    )
    run_id, prepared = batch.start_run(store, request)

    def take_over(_record: object, _stats: object) -> None:
        # What `rollscope run --resume r` on node-b does once this process is stale: claim
        # the run and drop its unfinished episodes. This process's next write then fails (a
        # step of a dropped episode, an episode node-b finished): raised here in its place.
        with elsewhere._writing() as session:
            session.execute(
                text("UPDATE runs SET host = 'node-b', pid = 4242 WHERE id = :r"), {"r": run_id}
            )
        elsewhere.delete_unfinished_episodes(run_id)
        raise ValueError(f"run {run_id} already has a finished episode among [...]")

    with pytest.raises(batch.JobError, match="was taken over by node-b pid 4242"):
        batch.play_run(store, run_id, prepared, on_episode=take_over)
    assert sql_rows(url, "SELECT status, error, host FROM runs") == [("running", None, "node-b")]
    store.close()
    elsewhere.close()
