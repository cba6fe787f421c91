"""A batch job killed at any moment loses no committed row, and `--resume` finishes it exactly."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from app import batch
from rollout_core.policies.base import Completion, Policy, PolicyRequest
from rollout_core.records import EpisodeKey, PolicyInfo, RunSpec
from rollout_core.runner import episode_seed
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from rollout_core.specs import RunRequest, build_spec
from storage.store import Store
from tests.conftest import REPO
from tests.support.cli import cli_env, rollscope, rollscope_cmd

# Long enough (~1.5 s of play here) that a one-process run, which commits its iterations
# every 0.25 s (`app.batch.SINK_GROUP_SECONDS`), is caught mid-run.
LIMIT, SAMPLES = "40", "40"
PLANNED = 40 * 40
RUN_ARGS = ("--policy", "random", "--dataset", "demo", "--limit", LIMIT, "--samples", SAMPLES,
            "--batch-size", "4", "--quiet")  # fmt: skip
KILL_TRIALS = 3
Outcomes = dict[tuple[str, int], tuple[str, int, float]]


def _finished(db: Path) -> int:
    """Finished episodes so far, read beside the writer (WAL readers never block it)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return 0
    try:
        return int(conn.execute("SELECT COUNT(outcome) FROM episodes").fetchone()[0])
    except sqlite3.OperationalError:  # not created or not migrated yet
        return 0
    finally:
        conn.close()


def _start(db: Path, name: str, args: tuple[str, ...] = RUN_ARGS) -> subprocess.Popen[str]:
    return subprocess.Popen(
        rollscope_cmd("run", *args, "--name", name, "--store", f"sqlite:///{db}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(),
    )


def _wait_for(proc: subprocess.Popen[str], db: Path, episodes: int) -> None:
    """Wait until `episodes` are committed; the run must still be going."""
    deadline = time.monotonic() + 120
    while _finished(db) < episodes:
        assert proc.poll() is None, f"the run ended before {episodes} episodes: {proc.stderr}"
        assert time.monotonic() < deadline, "the run did not progress"
        time.sleep(0.02)


def _check_integrity(db: Path, run_name: str) -> dict[str, Any]:
    """Every committed step is there and every counter agrees with the rows; returns figures."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        run_id, status = conn.execute(
            "SELECT id, status FROM runs WHERE name = ?", (run_name,)
        ).fetchone()
        mismatched = conn.execute(
            """SELECT e.id, e.steps, COUNT(s.id), COALESCE(MAX(s.step_no), 0), e.outcome
               FROM episodes e LEFT JOIN steps s ON s.episode_id = e.id
               WHERE e.run_id = ? GROUP BY e.id
               HAVING e.steps != COUNT(s.id) OR COALESCE(MAX(s.step_no), 0) != COUNT(s.id)
                   OR (e.outcome IS NOT NULL AND e.outcome != 'error' AND COUNT(s.id) = 0)""",
            (run_id,),
        ).fetchall()
        assert mismatched == [], f"episodes whose steps do not add up: {mismatched[:5]}"
        # A finished episode's last step says done; an unfinished one's never does.
        wrong_done = conn.execute(
            """SELECT e.id FROM episodes e JOIN steps s ON s.episode_id = e.id
               WHERE e.run_id = ? AND s.step_no = e.steps
                 AND s.done != (e.outcome IS NOT NULL)""",
            (run_id,),
        ).fetchall()
        assert wrong_done == [], f"done flags disagree with outcomes: {wrong_done[:5]}"
        finished, started = conn.execute(
            "SELECT COUNT(outcome), COUNT(*) FROM episodes WHERE run_id = ?", (run_id,)
        ).fetchone()
        steps = conn.execute(
            "SELECT COUNT(*) FROM steps JOIN episodes e ON e.id = episode_id WHERE e.run_id = ?",
            (run_id,),
        ).fetchone()[0]
        return {
            "run_id": run_id,
            "status": status,
            "finished": finished,
            "started": started,
            "steps": steps,
        }
    finally:
        conn.close()


def _outcomes(db: Path, run_name: str) -> Outcomes:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            """SELECT e.question_id, e.sample_index, e.outcome, e.steps, e.reward, e.seed,
                      r.spec FROM episodes e JOIN runs r ON r.id = e.run_id WHERE r.name = ?""",
            (run_name,),
        ).fetchall()
    finally:
        conn.close()
    keys = [(q, s) for q, s, *_ in rows]
    assert len(keys) == len(set(keys)), "an episode was recorded twice"
    for q, s, _, _, _, seed, spec in rows:
        run_seed = RunSpec.from_stored(json.loads(spec)).generation.seed
        assert seed == episode_seed(run_seed, q, s)
    return {(q, s): (o, n, round(r, 6)) for q, s, o, n, r, _, _ in rows}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """The same run played without interruption: what every resumed run must end up as."""
    db = tmp_path_factory.mktemp("reference") / "ref.db"
    res = rollscope("run", *RUN_ARGS, "--name", "ref", "--store", f"sqlite:///{db}")
    assert res.returncode == 0, res.stderr
    outcomes = _outcomes(db, "ref")
    assert len(outcomes) == PLANNED
    return outcomes


def _resume_and_compare(
    db: Path, name: str, reference: Outcomes
) -> subprocess.CompletedProcess[str]:
    res = rollscope("run", "--resume", name, "--store", f"sqlite:///{db}", "--quiet")
    assert res.returncode == 0, res.stderr
    figures = _check_integrity(db, name)
    assert figures["status"] == "completed"
    assert figures["finished"] == figures["started"] == PLANNED
    assert _outcomes(db, name) == reference, "the resumed run differs from the uninterrupted one"
    return res


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(KILL_TRIALS))
def test_kill_9_then_resume_loses_nothing(
    trial: int, tmp_path: Path, reference: Outcomes, capsys: Any
) -> None:
    db = tmp_path / "store.db"
    name = f"killed-{trial}"
    kill_at = random.Random(trial).randrange(10, PLANNED // 2)
    proc = _start(db, name)
    try:
        _wait_for(proc, db, kill_at)
        time.sleep(random.Random(trial).random() * 0.05)  # land anywhere in an iteration
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    store = Store(f"sqlite:///{db}")  # opens cleanly after the crash
    figures = _check_integrity(db, name)
    assert kill_at <= figures["finished"] < PLANNED
    run = store.find_run(name)
    # On this host the dead pid answers at once: no waiting for the heartbeat to go stale.
    assert run is not None and run.episodes_finished == figures["finished"]
    assert run.status == "interrupted"
    store.close()

    _resume_and_compare(db, name, reference)
    with capsys.disabled():
        print(
            f"\nkill -9 trial {trial}: killed after {figures['finished']}/{PLANNED} episodes "
            f"({figures['started'] - figures['finished']} in flight, {figures['steps']} steps); "
            "resumed to completion, 0 rows lost"
        )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_after_the_iteration_and_marks_cancelled(
    sig: signal.Signals, tmp_path: Path, reference: Outcomes
) -> None:
    db = tmp_path / "store.db"
    name = f"stopped-{sig.name}"
    proc = _start(db, name)
    try:
        _wait_for(proc, db, 20)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "cancelled" in lines[0], stderr
    assert "Traceback" not in stderr
    figures = _check_integrity(db, name)
    assert figures["status"] == "cancelled" and figures["finished"] < PLANNED
    _resume_and_compare(db, name, reference)


def test_resume_refuses_a_run_whose_process_is_alive(tmp_path: Path) -> None:
    """Two processes playing one run would write each episode twice."""
    db = tmp_path / "store.db"
    # Ten times the usual run: it must outlive the second command's start.
    at = RUN_ARGS.index("--samples") + 1
    longer = (*RUN_ARGS[:at], "400", *RUN_ARGS[at + 1 :])
    proc = _start(db, "alive", longer)
    try:
        _wait_for(proc, db, 5)
        res = rollscope("run", "--resume", "alive", "--store", f"sqlite:///{db}", "--quiet")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert res.returncode == 2, "resuming a live run was accepted"
    assert "running" in res.stderr and len(res.stderr.strip().splitlines()) == 1


class _Exploding:
    """A policy that works for a few calls and then raises, as a crashing model would."""

    def __init__(self, inner: Policy, calls: int) -> None:
        self.inner, self.calls, self.name = inner, calls, "exploding"
        self.tokenizer = None

    def describe(self) -> PolicyInfo:
        return self.inner.describe()

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        self.inner.release(episodes)

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        self.calls -= 1
        if self.calls < 0:
            raise RuntimeError("CUDA error: device-side assert triggered\nsecond line")
        return self.inner.generate(requests)


def test_policy_failure_mid_run_marks_the_run_failed(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    store = Store(f"sqlite:///{db}")
    request = RunRequest(
        name="boom",
        policy="random",
        dataset="demo",
        environment=EnvironmentSettings(step_budget=10),
        generation=GenerationSettings(batch_size=4),
        samples=2,
        limit=10,
    )
    prepared = batch.prepare(build_spec(request))
    prepared = dataclasses.replace(prepared, policy=_Exploding(prepared.policy, calls=7))
    run_id = store.create_run(prepared.spec, episodes_planned=prepared.planned)
    with pytest.raises(batch.JobError, match="run failed: RuntimeError: CUDA error") as info:
        batch.play_run(store, run_id, prepared)
    assert "\n" not in str(info.value)
    run = store.get_run(run_id)
    assert run is not None and run.status == "failed"
    assert run.error == "RuntimeError: CUDA error: device-side assert triggered"
    figures = _check_integrity(db, "boom")
    # Seven whole iterations of four live episodes (the queue of 20 never runs dry by then).
    assert figures["steps"] == 7 * 4
    store.close()


def test_corrupt_checkpoint_fails_before_any_run(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint-13"
    ckpt.mkdir()
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": 100,
    }
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "model.safetensors").write_bytes(
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json" + os.urandom(64)
    )
    db = tmp_path / "store.db"
    res = rollscope(
        "run", "--policy", f"hf:{ckpt}", "--dataset", "demo", "--limit", "2",
        "--store", f"sqlite:///{db}", "--quiet", "--device", "cpu",
    )  # fmt: skip
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(ckpt) in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    if db.exists():
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT status, error FROM runs").fetchall()
        conn.close()
        assert all(status == "failed" and error for status, error in rows), rows


def _transcripts(db: Path, run_name: str) -> dict[tuple[str, int, int], str]:
    """(question, sample, step) -> the model's raw output, for every step of a run."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            """SELECT e.question_id, e.sample_index, s.step_no, s.raw_output
               FROM steps s JOIN episodes e ON e.id = s.episode_id JOIN runs r ON r.id = e.run_id
               WHERE r.name = ?""",
            (run_name,),
        ).fetchall()
    finally:
        conn.close()
    return {(q, s, n): out for q, s, n, out in rows}


@pytest.mark.slow
def test_sampled_hf_run_killed_with_kill_9_resumes_to_the_same_episodes(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The hours-long runs are the sampled model runs: they must resume, and to the same text.

    The reference plays at another batch size: an episode's samples depend on its seed alone,
    never on which episodes shared its batch (every episode here takes all three steps, so
    without that the resumed batches would line up with the first run's by chance).
    """
    args = (
        "--policy", f"hf:{tiny_checkpoint}", "--dataset", "demo", "--limit", "30",
        "--samples", "2", "--temperature", "0.9", "--max-new-tokens", "12",
        "--step-budget", "3", "--device", "cpu", "--seed", "7", "--quiet",
    )  # fmt: skip
    db = tmp_path / "store.db"
    reference = _start(db, "uninterrupted", (*args, "--batch-size", "3"))
    _, stderr = reference.communicate(timeout=300)
    assert reference.returncode == 0, stderr
    proc = _start(db, "killed", (*args, "--batch-size", "4"))
    try:
        _wait_for(proc, db, 60 + 12)  # the reference's 60 episodes, then 12 of this run
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    figures = _check_integrity(db, "killed")
    assert 0 < figures["finished"] < 60, figures
    res = rollscope("run", "--resume", "killed", "--store", f"sqlite:///{db}", "--quiet")
    assert res.returncode == 0, res.stderr
    figures = _check_integrity(db, "killed")
    assert figures["status"] == "completed"
    assert figures["finished"] == figures["started"] == 60
    assert _outcomes(db, "killed") == _outcomes(db, "uninterrupted")
    assert _transcripts(db, "killed") == _transcripts(db, "uninterrupted")
