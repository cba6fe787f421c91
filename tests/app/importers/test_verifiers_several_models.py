"""`vf-eval -s` writes each model's evaluation to `outputs/evals/{env}--{model}/{run}/`: the
evaluations folder of two models is refused as one run (its accuracy would be a blend passed
off as one model's), and each model's folder imports as its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.app.importers.writers import verifiers_save
from tests.support.cli import rollscope
from tests.support.plain_sql import sql_rows


def _output(i: int, reward: float) -> dict[str, Any]:
    return {
        "example_id": i,
        "prompt": [{"role": "user", "content": f"How many rows in table {i}?"}],
        "completion": [{"role": "assistant", "content": "<solution>SELECT 1</solution>"}],
        "answer": "SELECT 1",
        "reward": reward,
    }


def test_an_evaluations_folder_of_two_models_is_refused(tmp_path: Path) -> None:
    evals = tmp_path / "outputs" / "evals"
    for model, reward in (("model-a", 1.0), ("model-b", 0.0)):
        folder = evals / f"text2sql--{model}" / "r1"
        verifiers_save(folder, [_output(i, reward) for i in range(4)], {"model": model})
    store = tmp_path / "runs.db"
    refused = rollscope("import", evals, "--name", "blend", "--store", store)
    assert refused.returncode == 2
    assert "holds the evaluations of 2 models (model-a, model-b)" in refused.stderr
    assert not store.exists()
    one = rollscope("import", evals / "text2sql--model-a", "--name", "a", "--store", store)
    assert one.returncode == 0, one.stderr
    held = (
        "SELECT r.checkpoint, COUNT(*), AVG(e.reward) FROM episodes e "
        "JOIN runs r ON r.id = e.run_id GROUP BY r.id"
    )
    assert sql_rows(f"sqlite:///{store}", held) == [("model-a", 4, 1.0)]
