"""A rollout job stops between two writes: a stop asked for once its episodes are in waits for
the run's last status instead of leaving the run `running`."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from app import batch
from rollout_core.specs import RunRequest
from storage.store import Store
from tests.support.benchmark import make_benchmark


def _started(tmp_path: Path) -> tuple[Store, int, batch.Prepared]:
    """A random-policy run created on a small benchmark, not yet played."""
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id, prepared = batch.start_run(
        store,
        RunRequest(policy="random", questions=str(questions), db_dir=str(db_dir), name="r"),
    )
    return store, run_id, prepared


def test_a_sigterm_as_the_run_is_marked_completed_leaves_it_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id, prepared = _started(tmp_path)
    set_status = store.set_run_status
    before = signal.getsignal(signal.SIGTERM)

    def signalled(run: int, status: Any, **kwargs: Any) -> None:
        if status == "completed":
            os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, just too late
        set_status(run, status, **kwargs)

    monkeypatch.setattr(store, "set_run_status", signalled)
    stats = batch.play_run(store, run_id, prepared)
    run = store.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert stats.episodes == run.episodes_finished > 0
    assert signal.getsignal(signal.SIGTERM) == before
    store.close()


def test_a_sigterm_while_the_episodes_are_planned_cancels_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id, prepared = _started(tmp_path)
    plan = batch.plan_tasks

    def planned_while_stopped(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, while a large plan is made
        return plan(*args)

    def unhandled(_signum: int, _frame: Any) -> None:
        raise AssertionError("SIGTERM met the default handling: the run would stay `running`")

    monkeypatch.setattr(batch, "plan_tasks", planned_while_stopped)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        with pytest.raises(batch.Cancelled, match="--resume"):
            batch.play_run(store, run_id, prepared)
    finally:
        signal.signal(signal.SIGTERM, previous)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    assert run.episodes_finished < prepared.planned  # stopped at its first safe point
    store.close()
