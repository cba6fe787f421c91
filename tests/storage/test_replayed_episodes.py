"""A trainer's run taken up after a crash: the episodes of the steps the resumed trainer plays
again are marked (`replayed_episodes`), and the training reads take each step as its latest
play while the run keeps both."""

from __future__ import annotations

from rollout_core.records import IterationBatch
from storage.store import Store
from storage.training import played_again, run_at_step, training_steps
from tests.support.records import finish, spec, start


def _play(store: Store, run_id: int, steps: range, correct: bool, first_sample: int) -> None:
    """Two episodes of question q1 at each step, numbered on from `first_sample`."""
    sink = store.sink(run_id)
    sample = first_sample
    for step in steps:
        for _ in range(2):
            sink.write(IterationBatch(started=[start("q1", sample, train_step=step)]))
            outcome = "correct" if correct else "wrong"
            ended = finish("q1", sample, outcome, float(correct), 1)
            sink.write(IterationBatch(finished=[ended]))
            sample += 1


def test_the_steps_played_again_are_read_as_their_latest_play(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=None)
    _play(store, run_id, range(3), False, 0)  # the stopped process: steps 0-2
    assert store.mark_replayed(run_id, 1) == 4
    _play(store, run_id, range(1, 3), True, 6)  # the resumed trainer: steps 1-2 again
    assert [(s.train_step, s.episodes, s.reward) for s in training_steps(store, run_id)] == [
        (0, 2, 0.0), (1, 2, 1.0), (2, 2, 1.0)
    ]  # fmt: skip
    assert played_again(store, run_id).by_step == {1: 2, 2: 2}
    run = store.get_run(run_id)
    assert run is not None and run.episodes_finished == 10, "the run keeps both plays"
    step = run_at_step(store, run, 2)
    assert (step.episodes_finished, step.correct) == (2, 2)
    # Marked once: a second resume marks only what it plays again that is not marked yet.
    assert store.mark_replayed(run_id, 2) == 2
    assert played_again(store, run_id).by_step == {1: 2, 2: 4}
    assert store.delete_run(run_id)
    assert store.replaced_among(list(range(1, 20))) == frozenset()
