"""A run's (or training step's) failure classes counted on some of its questions alone, as
Compare's table counts them over the questions both sides played."""

from __future__ import annotations

import pytest

from rollout_core.records import FailureClass, IterationBatch, Outcome
from storage import aggregates
from storage.read_models import RunStep
from storage.store import Store
from tests.support.records import finish, spec, start, step

# (question, training step, outcome): q0 and q1 are asked at steps 1 and 2, q2 at step 1.
PLAYED: list[tuple[str, int, Outcome]] = [
    ("q0", 1, "correct"), ("q0", 2, "correct"), ("q1", 1, "wrong"),
    ("q1", 2, "correct"), ("q2", 1, "wrong"), ("q2", 1, "budget_exhausted"),
]  # fmt: skip


CLASS: dict[Outcome, FailureClass] = {
    "correct": "correct", "wrong": "wrong_answer", "budget_exhausted": "budget_exhausted",
}  # fmt: skip


@pytest.mark.parametrize("chunk", [1, 500])
def test_failure_classes_are_counted_on_the_questions_asked_for(
    store_url: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aggregates, "_IN_CHUNK", chunk)  # one IN per question, or one for all
    store = Store(store_url)
    try:
        run = store.create_run(spec("trained", kind="training"), episodes_planned=None)
        sink = store.sink(run)
        for sample, (q, train_step, outcome) in enumerate(PLAYED):
            reward = 1.0 if outcome == "correct" else 0.0
            sink.write(IterationBatch(
                started=[start(q, sample, train_step=train_step)],
                steps=[step(q, sample, 1, action="ANSWER", done=True, reward=reward)],
                finished=[finish(q, sample, outcome, reward, 1, failure_class=CLASS[outcome])],
            ))  # fmt: skip
        on_two = store.failure_counts_on(run, ["q1", "q0", "q1"])
        at_step_1 = store.failure_counts_on(RunStep(run, 1), ["q1", "q2"])
    finally:
        store.close()
    assert {k: n for k, n in on_two.items() if n} == {"correct": 3, "wrong_answer": 1}
    assert {k: n for k, n in at_step_1.items() if n} == {
        "wrong_answer": 2,
        "budget_exhausted": 1,
    }
    assert set(on_two) >= {"correct", "wrong_answer", "sql_errors", "env_error"}
