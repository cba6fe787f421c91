"""The training docs' example script runs as a user would run it, and records its run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from storage.engine import StoreMissing
from storage.store import Store
from storage.training import training_steps
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "train_grpo.py"


def test_the_example_trains_and_records_a_training_run(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    res = subprocess.run(
        [sys.executable, str(EXAMPLE), "--checkpoint", str(tiny_checkpoint), "--store", store,
         "--steps", "2", "--output-dir", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run 'grpo-example' (#1) recorded in" in res.stdout
    opened = Store(store, read_only=True)
    run = opened.find_run("grpo-example")
    assert run is not None and run.status == "completed" and run.kind == "training"
    assert [(s.train_step, s.episodes, s.groups) for s in training_steps(opened, run.id)] == [
        (0, 8, 2),
        (1, 8, 2),
    ]


@pytest.mark.slow
def test_a_killed_trainer_leaves_an_interrupted_run_with_every_step_played(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    db = tmp_path / "store.db"
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--checkpoint", str(tiny_checkpoint), "--store",
         f"sqlite:///{db}", "--steps", "500", "--output-dir", str(tmp_path / "out")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        played: list[int] = []
        while len(played) < 2:  # two training steps written, the trainer still going
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "no two training steps within 300 s"
            time.sleep(0.2)
            try:
                reader = Store(f"sqlite:///{db}", read_only=True)
            except StoreMissing:  # the trainer has not created (or migrated) it yet
                continue
            run = reader.find_run("grpo-example")
            played = [s.train_step for s in training_steps(reader, run.id)] if run else []
            reader.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    opened = Store(f"sqlite:///{db}", read_only=True)
    run = opened.find_run("grpo-example")
    assert run is not None and run.status == "interrupted"
    steps = training_steps(opened, run.id)
    assert [s.train_step for s in steps][:2] == [0, 1]
    # Every step the trainer finished kept all its rollouts (2 groups of 4); the step it was
    # killed in keeps the episodes finished before the kill.
    assert all((s.episodes, s.groups) == (8, 2) for s in steps[:-1])
    assert 1 <= steps[-1].episodes <= 8
    assert run.episodes_finished == sum(s.episodes for s in steps)


def test_the_training_page_shows_the_example_script() -> None:
    page = (REPO / "docs" / "training.md").read_text()
    assert EXAMPLE.read_text().strip() in page
