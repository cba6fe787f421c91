"""The Training page between a training run and the run of its trainer's evaluation rollouts:
each says what the other is and opens it, the link following."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.records import IterationBatch
from rollout_core.settings import TrainingSettings
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.records import finish, spec, start


def _run(store: Store, name: str, evaluation_of: str | None, steps: range) -> int:
    settings = TrainingSettings(model="tiny", num_generations=2)
    made = spec(name, kind="training", training=settings, evaluation_of=evaluation_of)
    run_id = store.create_run(made, episodes_planned=None)
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


def _other_run(at: AppTest) -> str | None:
    """The label of the button to the other run, if the page shows one."""
    found = [b for b in at.button if b.key == "tr_other_run"]
    return found[0].label.replace("\\", "") if found else None  # markdown escapes


def test_a_training_run_opens_its_evaluation_and_back(runs: tuple[int, int, int]) -> None:
    training, evaluation, other = runs
    at = open_page("training/page.py", run=str(training))
    assert _other_run(at) == "Its evaluation: grpo-eval"
    at.button(key="tr_other_run").click().run()
    # The page and its link both name the evaluation run now.
    assert at.selectbox[0].value == evaluation
    assert at.query_params["run"] == str(evaluation)
    shown = texts(at).replace("\\", "")  # markdown escapes
    assert "The evaluation rollouts of training run grpo: each step is an evaluation" in shown
    assert _other_run(at) == "Training run grpo"
    at.button(key="tr_other_run").click().run()
    assert at.selectbox[0].value == training
    assert at.query_params["run"] == str(training)

    # A training run nobody evaluated says nothing of evaluation.
    at = open_page("training/page.py", run=str(other))
    assert _other_run(at) is None
    assert "evaluation rollouts" not in texts(at)
