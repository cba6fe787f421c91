"""Rewards, named rewards and log-probabilities whose sums or squares pass a float's largest
value: the groups' and the training steps' reads count them (as inf) on SQLite and on
PostgreSQL alike; PostgreSQL raised an overflow error where SQLite summed to inf."""

from __future__ import annotations

import math

from storage import training
from storage.store import Store
from tests.support.records import IterationBatch, finish, spec, start, step

HUGE = 1.5e308  # two of them sum past the largest float
LARGE = 1e300  # its square is past it


def _played(store: Store) -> int:
    """A training run: at step 0, q-huge's two rewards and named rewards of HUGE, their
    log-probabilities HUGE in size, and q-large's of -LARGE, 0 and LARGE; at step 1 q-small's
    0 and 1."""
    run_id = store.create_run(spec("huge", kind="training"), episodes_planned=7)
    sink = store.sink(run_id)
    plays = [("q-huge", HUGE, 0, -HUGE), ("q-huge", HUGE, 0, -HUGE)]
    plays += [("q-large", r, 0, -1.0) for r in (-LARGE, 0.0, LARGE)]
    plays += [("q-small", r, 1, -1.0) for r in (0.0, 1.0)]
    for sample, (q, reward, at, logprob) in enumerate(plays):
        outcome = "correct" if reward >= 1.0 else "wrong"
        ended = finish(
            q, sample, outcome, reward, 1, rewards={"exact": reward}, tokens_out=10,
            mean_logprob=logprob,
        )  # fmt: skip
        sink.write(
            IterationBatch(
                started=[start(q, sample, train_step=at, group_index=at)],
                steps=[step(q, sample, 1, done=True)],
                finished=[ended],
            )
        )
    return run_id


def test_the_groups_of_huge_rewards_are_read(store: Store) -> None:
    run_id = _played(store)
    found = store.group_overview(run_id)
    assert found.total == 3 and found.episodes == 7
    std = {g.key.question_id: g.std for g in found.groups}
    assert math.isinf(std["q-large"]) and std["q-small"] == math.sqrt(0.5)
    assert found.std_beyond["correctness"] >= 1


def test_the_training_steps_of_huge_rewards_are_read(store: Store) -> None:
    run_id = _played(store)
    steps = training.training_steps(store, run_id)
    assert [s.train_step for s in steps] == [0, 1]
    assert math.isinf(steps[0].reward) and steps[1].reward == 0.5
    # The step's spread cannot be told from sums past the range: inf, as a group's, not 0.
    assert math.isinf(steps[0].reward_std) and steps[1].reward_std == math.sqrt(0.5)
    named = training.named_reward_steps(store, run_id)
    sums = {(n.train_step, n.name): n.total for n in named}
    assert math.isinf(sums[(0, "exact")]) and sums[(1, "exact")] == 1.0
