"""Fork runs through the normal run path: planning from the store, first failing steps, queued
forks played by a worker's command, resume after a stop, a source that changed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import batch
from app.forks import (
    ForkError,
    ForkRequest,
    first_failing_step,
    fork_tasks,
    plan_episode_fork,
    plan_failure_forks,
    queue_episode_fork,
)
from rollout_core.records import EpisodeRecord, RunSpec
from rollout_core.runner import RunStats
from rollout_core.specs import PlannedRun, RunRequest
from storage.read_models import EpisodeDetail, EpisodeFilter, StoredStep
from storage.store import Store
from tests.support.benchmark import make_benchmark


@pytest.fixture()
def recorded(tmp_path: Path) -> Iterator[tuple[Store, int, Path]]:
    """A store holding one `random` run (2 samples of each fixture question) and its db file."""
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id, prepared = batch.start_run(
        store,
        RunRequest(
            policy="random", questions=str(questions), db_dir=str(db_dir), samples=2, name="rnd"
        ),
    )
    batch.play_run(store, run_id, prepared)
    yield store, run_id, db_dir / "concerts" / "concerts.sqlite"
    store.close()


def _details(store: Store, run_id: int) -> list[EpisodeDetail]:
    return list(store.iter_episode_details(run_id))


def _step(no: int, action: str = "QUERY", **kw: object) -> StoredStep:
    fields: dict[str, object] = {
        "question_id": "q", "sample_index": 0,
        "id": no, "step_no": no, "prompt": (), "raw_output": f"{action} x{no}",
        "action": action, "argument": f"x{no}", "parsed": True, "observation": "ok",
        "error": None, "reward": 0.0, "done": False, "tokens_in": None, "tokens_out": None,
        "policy_seconds": 0.0, "env_seconds": 0.0,
    }  # fmt: skip
    fields.update(kw)
    return StoredStep(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("steps", "outcome", "expected"),
    [
        ([_step(1), _step(2, error="no such table")], "budget_exhausted", 2),
        ([_step(1, parsed=False), _step(2, error="x")], "budget_exhausted", 1),
        ([_step(1), _step(2), _step(3, argument="X1")], "budget_exhausted", 3),  # repeats step 1
        ([_step(1), _step(2, "ANSWER")], "wrong", 2),
        ([_step(1), _step(2), _step(3)], "budget_exhausted", 3),  # clean steps: the last
        ([_step(1, error="x", replayed=True), _step(2), _step(3, error="y")], "wrong", 3),
        ([_step(1), _step(2, "ANSWER")], "correct", None),
        ([], "error", None),
    ],
)
def test_first_failing_step(steps: list[StoredStep], outcome: str, expected: int | None) -> None:
    assert first_failing_step(steps, outcome) == expected  # type: ignore[arg-type]


def test_a_fork_of_one_episode_is_a_run_like_any_other(
    recorded: tuple[Store, int, Path],
) -> None:
    store, run_id, _ = recorded
    source = next(d for d in _details(store, run_id) if len(d.steps) >= 3)
    plan = plan_episode_fork(store, source.summary.id, 3, ForkRequest(policy="oracle"))
    spec = plan.spec
    assert (spec.kind, spec.policy, spec.environment) == ("fork", "oracle", RunSpec.from_stored(
        source.run.spec).environment)  # fmt: skip
    assert spec.fork is not None and spec.fork.source_run_id == run_id
    assert [(p.episode_id, p.step) for p in spec.fork.points] == [(source.summary.id, 3)]
    assert RunSpec.from_stored(spec.to_stored()) == spec
    run_id2, prepared = batch.start_run(store, _as_request(plan))
    batch.play_run(store, run_id2, prepared)
    (forked,) = _details(store, run_id2)
    assert (forked.summary.forked_from, forked.summary.fork_step) == (source.summary.id, 3)
    assert forked.summary.outcome == "correct"
    assert [s.raw_output for s in forked.steps[:2]] == [s.raw_output for s in source.steps[:2]]
    assert [s.replayed for s in forked.steps] == [True, True, False, False][: len(forked.steps)]


def _as_request(plan: PlannedRun) -> RunRequest:
    """The request that builds this plan again (start_run takes requests)."""
    spec = plan.spec
    return RunRequest(
        policy=spec.policy, questions=spec.questions_path, db_dir=spec.db_dir, name=spec.name,
        question_ids=spec.question_ids or (), samples=spec.samples, generation=spec.generation,
        environment=spec.environment, kind=spec.kind, fork=spec.fork,
    )  # fmt: skip


def test_first_error_forks_every_failed_episode_at_its_first_failing_step(
    recorded: tuple[Store, int, Path],
) -> None:
    store, run_id, _ = recorded
    found = plan_failure_forks(store, "rnd", ForkRequest(policy="oracle", samples=2))
    failed = [d for d in _details(store, run_id) if d.summary.outcome != "correct"]
    assert found.failed == len(failed) and found.skipped == 0
    fork = found.plan.spec.fork
    assert fork is not None and fork.rule == "first-error"
    assert {p.episode_id: p.step for p in fork.points} == {
        d.summary.id: first_failing_step(d.steps, d.summary.outcome) for d in failed
    }
    assert found.plan.planned == 2 * len(failed)
    new_id, prepared = batch.start_run(store, _as_request(found.plan))
    batch.play_run(store, new_id, prepared)
    forks = _details(store, new_id)
    assert len(forks) == 2 * len(failed)
    assert {d.summary.outcome for d in forks} == {"correct"}
    by_source = {d.summary.id: d for d in failed}
    for d in forks:
        source = by_source[d.summary.forked_from or 0]
        assert d.summary.sample_index // 2 == source.summary.sample_index
        assert sum(s.replayed for s in d.steps) == (d.summary.fork_step or 0) - 1


def test_a_queued_fork_is_played_by_the_worker_command_and_resumes(
    recorded: tuple[Store, int, Path],
) -> None:
    store, _, _ = recorded
    plan = plan_failure_forks(store, "rnd", ForkRequest(policy="oracle")).plan
    run_id = store.create_run(plan.spec, episodes_planned=plan.planned, status="queued")
    run_id, prepared, skip = batch.reopen_run(store, str(run_id), resume=False)

    def stop_after_two(rec: EpisodeRecord, stats: RunStats) -> None:
        if stats.episodes == 2:
            raise KeyboardInterrupt

    with pytest.raises(batch.Cancelled):
        batch.play_run(store, run_id, prepared, skip=skip, on_episode=stop_after_two)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    run_id, prepared, skip = batch.reopen_run(store, str(run_id), resume=True)
    assert 2 <= len(skip) < plan.planned
    batch.play_run(store, run_id, prepared, skip=skip)
    run = store.get_run(run_id)
    assert run is not None and (run.status, run.episodes_finished) == ("completed", plan.planned)
    keys = [(d.summary.question_id, d.summary.sample_index) for d in _details(store, run_id)]
    assert len(keys) == len(set(keys)) == plan.planned


def test_a_database_changed_since_the_source_ends_those_episodes_in_error(
    recorded: tuple[Store, int, Path],
) -> None:
    store, run_id, db = recorded
    shown = ("Ada", "Arena", "Hall", "Club")  # values the update below changes

    def first_shown(d: EpisodeDetail) -> int | None:
        return next((s.step_no for s in d.steps if any(v in s.observation for v in shown)), None)

    source = next(d for d in _details(store, run_id) if (first_shown(d) or 99) < len(d.steps))
    changed = first_shown(source) or 0
    with sqlite3.connect(db) as conn:  # every table's first rows change
        conn.execute("UPDATE singer SET name = name || '!'")
        conn.execute("UPDATE concert SET venue = venue || '!'")
    plan = plan_episode_fork(store, source.summary.id, changed + 1, ForkRequest(policy="oracle"))
    new_id, prepared = batch.start_run(store, _as_request(plan))
    batch.play_run(store, new_id, prepared)
    (forked,) = _details(store, new_id)
    assert forked.summary.outcome == "error"
    assert forked.error is not None and forked.error.startswith(f"replayed step {changed}")
    assert all(s.replayed for s in forked.steps) and len(forked.steps) == changed


@pytest.mark.parametrize(
    ("episode", "step", "problem"),
    [(10**6, 1, "no episode 1000000"), (1, 0, "--step must be between 1 and"),
     (1, 99, "--step must be between 1 and")],
)  # fmt: skip
def test_bad_fork_points_are_refused(
    recorded: tuple[Store, int, Path], episode: int, step: int, problem: str
) -> None:
    store, _, _ = recorded
    with pytest.raises(ForkError, match=problem):
        plan_episode_fork(store, episode, step, ForkRequest())


def test_a_run_without_failures_has_nothing_to_fork(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        request = RunRequest(policy="oracle", questions=str(questions), db_dir=str(db_dir))
        run_id, prepared = batch.start_run(store, request)
        batch.play_run(store, run_id, prepared)
        with pytest.raises(ForkError, match="has no failed episodes"):
            plan_failure_forks(store, str(run_id), ForkRequest())
    finally:
        store.close()


def test_a_fork_whose_source_is_deleted_fails_in_one_line(
    recorded: tuple[Store, int, Path],
) -> None:
    store, run_id, _ = recorded
    first = next(iter(_details(store, run_id)))
    plan = plan_episode_fork(store, first.summary.id, 1, ForkRequest(policy="oracle"))
    fork_id = store.create_run(plan.spec, episodes_planned=plan.planned, status="queued")
    store.delete_run(run_id)
    with pytest.raises(ForkError, match="no longer in the store"):
        fork_tasks(store, plan)
    fork_id, prepared, skip = batch.reopen_run(store, str(fork_id), resume=False)
    with pytest.raises(batch.JobError, match="no longer in the store"):
        batch.play_run(store, fork_id, prepared, skip=skip)
    run = store.get_run(fork_id)
    assert run is not None and run.status == "failed" and "no longer" in (run.error or "")
    assert store.list_episodes(EpisodeFilter(run_ids=(fork_id,))).items == []


def test_queueing_a_fork_writes_one_queued_run_or_nothing(
    recorded: tuple[Store, int, Path], tmp_path: Path
) -> None:
    from app.dashboard.fork.form import ForkForm, queue_fork
    from app.dashboard.launch.form import LaunchError

    store, run_id, _ = recorded
    source = next(d for d in _details(store, run_id) if len(d.steps) >= 2)
    fork_id = queue_episode_fork(store, source.summary.id, 2, ForkRequest(policy="oracle"))
    fork = store.get_run(fork_id)
    assert fork is not None and (fork.status, fork.kind, fork.episodes_planned) == (
        "queued",
        "fork",
        1,
    )
    before = [r.id for r in store.list_runs()]
    with pytest.raises(LaunchError) as bad:  # the dashboard's form: every field at once
        queue_fork(store, source.summary.id, 2, ForkForm("nope", 9.0), [tmp_path])
    assert set(bad.value.errors) == {"policy", "temperature"}
    with pytest.raises(LaunchError, match="between 1 and"):
        queue_fork(store, source.summary.id, 99, ForkForm("oracle", 0.0), [tmp_path])
    assert [r.id for r in store.list_runs()] == before  # refusals wrote nothing


def test_a_default_fork_name_is_short_and_says_what_it_continues() -> None:
    # Names were as long as `checkpoint-100-train-fork-ep640-step2-oracle-20261202-224513`.
    from app.forks import default_fork_name

    name = default_fork_name("checkpoint-100-train", "ep640-step2", "oracle")
    assert name.startswith("checkpoint-100-train-ep640-step2-oracle-")
    assert len(name) <= len("checkpoint-100-train-ep640-step2-oracle-") + 6
    assert default_fork_name("ckpt", "first-error", "hf:/models/run/ckpt-9").startswith(
        "ckpt-first-error-ckpt-9-"
    )


def test_the_fork_form_ignores_a_directory_left_typed_for_another_choice() -> None:
    # Oracle was refused because a path was still in the directory field.
    from app.dashboard.fork.form import ForkForm, fork_request
    from app.dashboard.launch.form import OTHER_CHECKPOINT, LaunchError

    request = fork_request(ForkForm("oracle", 0.0, checkpoint="/models/x"), ())
    assert request.policy == "oracle"
    with pytest.raises(LaunchError, match="no checkpoint roots configured"):
        fork_request(ForkForm(OTHER_CHECKPOINT, 0.0, checkpoint="/models/x"), ())
