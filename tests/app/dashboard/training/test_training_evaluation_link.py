"""The Training page between a training run and the run of its trainer's evaluation rollouts:
each says what the other is and links to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.records import IterationBatch
from rollout_core.settings import TrainingSettings
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.records import finish, spec, start


def _run(store: Store, name: str, evaluation_of: str | None, steps: range) -> int:
    settings = TrainingSettings(model="tiny", num_generations=2, evaluation_of=evaluation_of)
    run_id = store.create_run(spec(name, kind="training", training=settings), episodes_planned=None)
    sink = store.sink(run_id)
    for sample, at in enumerate(steps):
        began = dataclasses.replace(start("q1", sample), train_step=at, group_index=sample)
        sink.write(
            IterationBatch(started=[began], finished=[finish("q1", sample, "wrong", 0.0, 1)])
        )
    store.set_run_status(run_id, "completed")
    return run_id


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    path = tmp_path / "store.db"
    store = Store(str(path))
    training = _run(store, "grpo", None, range(0, 3))
    evaluation = _run(store, "grpo-eval", "grpo", range(1, 4))
    other = _run(store, "other", None, range(0, 2))
    store.close()
    monkeypatch.setenv(ENV_STORE, str(path))
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return training, evaluation, other


def _links(at: object) -> list[tuple[str, str]]:
    return [
        (e.proto.label.replace("\\", ""), e.proto.query_string)  # markdown escapes
        for e in at.get("page_link")  # type: ignore[attr-defined]
        if "training" in e.proto.page
    ]


def test_a_training_run_links_to_its_evaluation_and_back(runs: tuple[int, int, int]) -> None:
    training, evaluation, other = runs
    at = open_page("training/page.py", run=str(training))
    assert _links(at) == [("Its evaluation: grpo-eval", f"run={evaluation}")]

    at = open_page("training/page.py", run=str(evaluation))
    shown = texts(at).replace("\\", "")  # markdown escapes
    assert "The evaluation rollouts of training run grpo: each step is an evaluation" in shown
    assert _links(at) == [("Training run grpo", f"run={training}")]

    # A training run nobody evaluated says nothing of evaluation.
    at = open_page("training/page.py", run=str(other))
    assert _links(at) == []
    assert "evaluation rollouts" not in texts(at)
