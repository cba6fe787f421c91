"""The README's training script runs as a user would run it, and records its run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from storage.store import Store
from storage.training import training_steps

REPO = Path(__file__).resolve().parents[2]
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


def test_the_readme_shows_the_example_script() -> None:
    readme = (REPO / "README.md").read_text()
    assert EXAMPLE.read_text().strip() in readme
