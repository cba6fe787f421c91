"""`--ray`: one run played by Ray workers on a local 2-CPU cluster, recorded in one store.

Every episode is recorded once; a worker killed with SIGKILL is replaced and its unfinished
episodes are played again from their first step, so a greedy tiny model's outputs match a run
in one process step for step; cancel, Ctrl-C and --resume hold as without Ray.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import batch, jobs
from app.fanout.cluster import RAY_TAG, RayFanout
from app.fanout.driver import FanoutError
from app.fanout.target import RayTarget, TargetError
from rollout_core.records import EpisodeKey, EpisodeRecord
from rollout_core.runner import RunStats
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from rollout_core.specs import RunRequest
from storage.engine import get_engine
from storage.models import Episode, Run, Step
from storage.store import Store, StoreError
from tests.conftest import REPO

# The store tests' throwaway PostgreSQL server, reused here as a fixture.
from tests.support.postgres import PgServer

WORKERS = 2
# Enough episodes that a kill or a cancel lands mid-run (~10 s on 2 busy cores), few enough to
# stay quick: 32 demo questions, 4 steps of up to 24 tokens, 4 episodes per batch.
HF_QUESTIONS = 32
HF_GENERATION = GenerationSettings(temperature=0.0, max_new_tokens=24, batch_size=4, threads=1)
HF_ENVIRONMENT = EnvironmentSettings(step_budget=4)
Outputs = dict[tuple[str, int, int], str]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster with 2 CPUs for the module; RayFanout uses it and leaves it up."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[dev]'")
    ray.init(
        num_cpus=2, num_gpus=0, include_dashboard=False, logging_level=logging.ERROR,
        log_to_driver=False,
    )  # fmt: skip
    yield
    ray.shutdown()


def _hf_request(checkpoint: Path, name: str) -> RunRequest:
    return RunRequest(
        policy=f"hf:{checkpoint}",
        dataset="demo",
        limit=HF_QUESTIONS,
        name=name,
        generation=HF_GENERATION,
        environment=HF_ENVIRONMENT,
    )


def _outputs(store: Store, run_id: int) -> Outputs:
    """Every recorded step's raw output by (question, sample, step)."""
    with Session(get_engine(store._url)) as s:
        rows = s.execute(
            select(Episode.question_id, Episode.sample_index, Step.step_no, Step.raw_output)
            .join(Step, Step.episode_id == Episode.id)
            .where(Episode.run_id == run_id)
        )
        return {(q, i, n): out for q, i, n, out in rows}


def _check_recorded_once(store: Store, run_id: int, planned: int) -> None:
    """Each (question, sample) once, finished, its steps numbered 1..n as its counter says."""
    with Session(get_engine(store._url)) as s:
        episodes = s.execute(
            select(Episode.id, Episode.question_id, Episode.sample_index, Episode.steps).where(
                Episode.run_id == run_id, Episode.outcome.is_not(None)
            )
        ).all()
        unfinished = s.scalars(
            select(Episode.id).where(Episode.run_id == run_id, Episode.outcome.is_(None))
        ).all()
        steps: dict[int, list[int]] = {}
        for episode_id, step_no in s.execute(
            select(Step.episode_id, Step.step_no).join(Episode).where(Episode.run_id == run_id)
        ):
            steps.setdefault(episode_id, []).append(step_no)
    keys = Counter((q, i) for _, q, i, _ in episodes)
    assert [k for k, n in keys.items() if n > 1] == []
    assert (len(keys), list(unfinished)) == (planned, [])
    bad = [e for e, _, _, n in episodes if sorted(steps.get(e, [])) != list(range(1, n + 1))]
    assert bad == [], f"episodes whose steps are not 1..n: {bad[:5]}"


def _fanout(store: Store, workers: int = WORKERS) -> RayFanout:
    return RayFanout(RayTarget("local", workers), store.url)


def _play(
    store: Store, request: RunRequest, fanout: RayFanout | None, *, notes: list[str] | None = None
) -> tuple[int, RunStats, list[EpisodeRecord]]:
    run_id, prepared = batch.start_run(store, request, fanout=fanout)
    seen: list[EpisodeRecord] = []
    stats = batch.play_run(
        store,
        run_id,
        prepared,
        on_episode=lambda rec, _: seen.append(rec),
        on_note=None if notes is None else notes.append,
    )
    return run_id, stats, seen


def _when_finished(store: Store, run_id: int, episodes: int, action: Callable[[], None]) -> Any:
    """A thread that runs `action` once the run has `episodes` finished ones; .acted tells."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = store.get_run(run_id)
            if run is not None and run.episodes_finished >= episodes:
                if run.status == "running" and run.episodes_finished < run.episodes_planned:
                    action()
                    thread.acted = True  # type: ignore[attr-defined]
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.acted = False  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.fixture(scope="module")
def hf_reference(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    """The tiny model's greedy outputs played in one process, without Ray."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('reference') / 'store.db'}")
    try:
        run_id, stats, _ = _play(store, _hf_request(tiny_checkpoint, "one-process"), None)
        assert stats.episodes == HF_QUESTIONS
        return _outputs(store, run_id)
    finally:
        store.close()


def test_oracle_scores_every_demo_question_on_two_workers(
    tmp_path: Path, ray_cluster: None
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    request = RunRequest(policy="oracle", dataset="demo", samples=2, name="oracle-ray")
    run_id, stats, seen = _play(store, request, _fanout(store))
    run = store.get_run(run_id)
    assert run is not None
    assert (run.status, run.episodes_finished, run.accuracy) == ("completed", 242, 1.0)
    assert (stats.episodes, stats.correct, len(seen)) == (242, 242, 242)
    assert len({r.key for r in seen}) == 242  # the progress bar counted each episode once
    assert store.run_tags(run_id) == {RAY_TAG: "local, 2 workers"}
    _check_recorded_once(store, run_id, 242)


@pytest.mark.slow
def test_oracle_on_spider_dev_matches_one_process(
    tmp_path: Path, spider: Path, ray_cluster: None
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    request = RunRequest(
        policy="oracle",
        questions=str(spider / "questions.json"),
        db_dir=str(spider / "database"),
        generation=GenerationSettings(batch_size=64),
    )
    outcomes: list[dict[str, str | None]] = []
    for name, fanout in (("spider-one", None), ("spider-ray", _fanout(store))):
        run_id, stats, _ = _play(store, dataclasses.replace(request, name=name), fanout)
        assert stats.episodes == 972
        with Session(get_engine(store._url)) as s:
            rows = s.execute(
                select(Episode.question_id, Episode.outcome).where(Episode.run_id == run_id)
            )
            outcomes.append({q: o for q, o in rows})
        _check_recorded_once(store, run_id, 972)
    one, fanned = outcomes
    assert fanned == one
    # As in one process (tests/rollout_core/test_oracle_integration.py): the few misses are
    # grader limits on Spider's gold queries, listed there.
    assert sum(o == "correct" for o in fanned.values()) >= 0.99 * 972


@pytest.mark.slow
def test_tiny_hf_plays_the_same_episodes_as_one_process(
    tmp_path: Path, tiny_checkpoint: Path, hf_reference: Outputs, ray_cluster: None
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    fanout = _fanout(store)
    run_id, stats, _ = _play(store, _hf_request(tiny_checkpoint, "hf-ray"), fanout)
    assert stats.episodes == HF_QUESTIONS
    assert _outputs(store, run_id) == hf_reference
    run = store.get_run(run_id)
    assert run is not None and run.policy_info is not None
    assert run.policy_info["name"] == "hf"  # what a worker's policy reported


def _kill_a_worker(
    store: Store, tiny_checkpoint: Path, hf_reference: Outputs, name: str
) -> list[str]:
    """Play the tiny model on 2 workers, SIGKILL one mid-shard; checks the run; its notes."""
    fanout = _fanout(store)
    run_id, prepared = batch.start_run(store, _hf_request(tiny_checkpoint, name), fanout=fanout)
    victim = fanout.worker_pids()[0]
    killer = _when_finished(store, run_id, 2, lambda: os.kill(victim, signal.SIGKILL))
    notes: list[str] = []
    seen: list[EpisodeKey] = []
    stats = batch.play_run(
        store,
        run_id,
        prepared,
        on_episode=lambda rec, _: seen.append(rec.key),
        on_note=notes.append,
    )
    killer.join()
    assert killer.acted, "the run ended before the worker could be killed"
    # Told once; its unfinished episodes played again, unless a busy machine let it finish
    # them all before the kill landed.
    died = [n for n in notes if "died" in n]
    assert len(died) == 1 and (
        re.search(r"unfinished episodes? (is|are) played again", died[0])
        or "episodes finished" in died[0]
    ), notes
    run = store.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert stats.episodes == len(seen) == len(set(seen)) == HF_QUESTIONS
    _check_recorded_once(store, run_id, HF_QUESTIONS)
    # Replayed from the first step with the same seeds: the same episodes, step for step.
    assert _outputs(store, run_id) == hf_reference
    return notes


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_nothing_is_lost_or_duplicated(
    tmp_path: Path,
    tiny_checkpoint: Path,
    hf_reference: Outputs,
    ray_cluster: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The driver's sink of the killed worker holds several iterations when it dies.
    monkeypatch.setattr(batch, "SINK_GROUP_SECONDS", 2.0)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    _kill_a_worker(store, tiny_checkpoint, hf_reference, "hf-killed")


@pytest.mark.slow
@pytest.mark.postgres
def test_a_killed_worker_writing_to_postgresql_directly(
    postgres_server: PgServer, tiny_checkpoint: Path, hf_reference: Outputs, ray_cluster: None
) -> None:
    with postgres_server.database("rollscope_ray") as url:
        store = Store(url)
        try:
            assert _fanout(store).workers_write
            _kill_a_worker(store, tiny_checkpoint, hf_reference, "hf-killed-pg")
        finally:
            store.close()


@pytest.mark.slow
def test_cancel_from_the_dashboard_then_resume_on_ray(
    tmp_path: Path,
    tiny_checkpoint: Path,
    hf_reference: Outputs,
    ray_cluster: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Look for the cancel at every iteration: with the 2 s default the last episodes can all
    # finish between two looks on a fast machine, and the run completes before it is seen.
    monkeypatch.setattr(batch, "CANCEL_POLL_SECONDS", 0.0)
    # The driver's sinks hold several of the tiny model's iterations (not one each, as at the
    # default 0.25 s): the cancel finds them holding some.
    monkeypatch.setattr(batch, "SINK_GROUP_SECONDS", 2.0)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id, prepared = batch.start_run(
        store, _hf_request(tiny_checkpoint, "hf-cancelled"), fanout=_fanout(store)
    )
    canceller = _when_finished(store, run_id, 2, lambda: jobs.cancel_run(store, run_id))
    seen: list[EpisodeKey] = []
    with pytest.raises(batch.Cancelled):
        batch.play_run(store, run_id, prepared, on_episode=lambda rec, _: seen.append(rec.key))
    canceller.join()
    assert canceller.acted
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    assert 2 <= run.episodes_finished < HF_QUESTIONS
    # Every episode the run reported finished is in the store: what the driver's sinks held
    # when the run stopped was written.
    assert run.episodes_finished == len(seen)

    run_id, prepared, skip = batch.reopen_run(
        store, str(run_id), resume=True, fanout=_fanout(store)
    )
    assert len(skip) == run.episodes_finished
    stats = batch.play_run(store, run_id, prepared, skip=skip)
    assert stats.episodes == HF_QUESTIONS - len(skip)
    run = store.get_run(run_id)
    assert run is not None and run.status == "completed"
    _check_recorded_once(store, run_id, HF_QUESTIONS)
    assert _outputs(store, run_id) == hf_reference


def test_a_worker_that_cannot_build_its_policy_leaves_no_run(
    tmp_path: Path, tiny_checkpoint: Path, ray_cluster: None
) -> None:
    # The driver only checks the files are there (it never loads the model); the workers
    # cannot read the weights, as on a node with a half-copied checkpoint.
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    broken = tmp_path / "ckpt"
    broken.mkdir()
    for f in tiny_checkpoint.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    next(broken.glob("*.safetensors")).write_bytes(b"not safetensors")
    with pytest.raises(FanoutError, match="a Ray worker could not start: ") as caught:
        batch.start_run(store, _hf_request(broken, "hf-broken"), fanout=_fanout(store, 1))
    assert "\n" not in str(caught.value)
    assert store.list_runs() == []


def _finished_in(db: Path) -> int:
    """Finished episodes in a SQLite store another process is creating (0 until it exists)."""
    try:
        reader = Store(f"sqlite:///{db}", read_only=True)
    except StoreError:  # not there yet, or not migrated yet
        return 0
    try:
        return sum(r.episodes_finished for r in reader.list_runs())
    finally:
        reader.close()


@pytest.mark.slow
def test_ctrl_c_stops_a_ray_run_and_resume_finishes_it(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """The CLI as a user runs it: its own local cluster, Ctrl-C to the terminal's process
    group (Ray's processes included), exit 130, then --resume on Ray."""
    db = tmp_path / "store.db"
    args = ["--policy", f"hf:{tiny_checkpoint}", "--dataset", "demo", "--limit", str(HF_QUESTIONS),
            "--step-budget", "4", "--max-new-tokens", "24", "--batch-size", "4", "--temperature",
            "0", "--name", "hf-ctrl-c"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", *args, "--store", str(db), "--quiet",
         "--ray", "local", "--workers", "2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if _finished_in(db) >= 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "the run is marked cancelled (continue it with --resume 1)" in err
    resumed = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "--resume", "hf-ctrl-c", "--store", str(db),
         "--quiet", "--ray", "local", "--workers", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    writer = Store(f"sqlite:///{db}")
    with Session(get_engine(writer._url)) as s:
        assert s.scalar(select(Run.status)) == "completed"
    _check_recorded_once(writer, 1, HF_QUESTIONS)


@pytest.mark.slow
def test_ray_local_is_a_cluster_of_the_runs_own_whatever_ray_address_names(
    tmp_path: Path,
) -> None:
    """A shell where RAY_ADDRESS names another cluster (here one that does not answer): `--ray
    local` starts its own and plays there, never joins or waits on that one."""
    db = tmp_path / "store.db"
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9", "RAY_NUM_REDIS_GET_RETRIES": "2"}
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "--policy", "oracle", "--dataset", "demo",
         "--limit", "4", "--store", str(db), "--quiet", "--ray", "local", "--workers", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    [run] = Store(str(db), read_only=True).list_runs()
    assert (run.status, run.episodes_finished, run.correct) == ("completed", 4, 4)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "2"], "--workers and --gpus-per-worker need --ray local or --ray ADDRESS"),
        (["--ray", "local"], "--ray needs --workers N"),
        (["--ray", "local", "--workers", "0"], "--workers must be at least 1, got 0"),
        (["--ray", "local", "--workers", "1", "--gpus-per-worker", "-1"],
         "--gpus-per-worker must be 0 or more"),
    ],
)  # fmt: skip
def test_bad_ray_flags_are_one_line_and_leave_no_store(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    db = tmp_path / "store.db"
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "--store", str(db), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not db.exists()


def test_an_unreachable_cluster_is_refused_in_one_line_before_a_store_exists(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "store.db"
    env = {**os.environ, "HOME": str(tmp_path)}  # no Ray token here: no note of one
    env.pop("RAY_AUTH_MODE", None)
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "--store", str(db),
         "--ray", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2
    assert f"cannot reach the Ray cluster at '127.0.0.1:{port}'" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not db.exists(), "the workers are refused before a new store is made"


@pytest.mark.slow
def test_more_gpus_than_the_cluster_has_are_refused_before_a_run_exists(
    tmp_path: Path, ray_cluster: None
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    fanout = RayFanout(RayTarget("local", 2, gpus_per_worker=1), store.url)
    with pytest.raises(TargetError, match=r"2 workers x 1 GPU do not fit"):
        batch.start_run(store, RunRequest(policy="oracle", name="too-wide"), fanout=fanout)
    assert store.list_runs() == []
