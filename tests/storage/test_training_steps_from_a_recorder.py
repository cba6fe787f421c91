"""The Training page's figures per step from a Recorder's episodes: the log-probability,
token-weighted where every episode says how many tokens it wrote, the episodes' mean where
some do not (a loop may know the mean alone); a group whose rewards overflow the sums classed
as GRPO groups classes it."""

from __future__ import annotations

import math

import pytest

from app.recorder import Recorder
from storage.store import Store
from storage.training import training_steps

TURNS = [{"role": "user", "content": "How many?"}, {"role": "assistant", "content": "ANSWER 1"}]


def test_a_step_without_token_counts_has_the_episodes_mean(store: Store) -> None:
    with Recorder(store, run="lp", kind="training") as rec:
        # step 0: token counts given; step 1: one episode without; step 2: none given
        rec.episode(question="Q", turns=TURNS, reward=1.0, step=0, mean_logprob=-1.0, tokens_out=3)
        rec.episode(question="Q", turns=TURNS, reward=0.0, step=0, mean_logprob=-3.0, tokens_out=1)
        rec.episode(question="Q", turns=TURNS, reward=1.0, step=1, mean_logprob=-1.0, tokens_out=3)
        rec.episode(question="Q", turns=TURNS, reward=0.0, step=1, mean_logprob=-3.0)
        rec.episode(question="Q", turns=TURNS, reward=1.0, step=2, mean_logprob=-0.5)
        rec.episode(question="Q", turns=TURNS, reward=0.0, step=2, mean_logprob=-2.5)
        rec.episode(question="Q", turns=TURNS, reward=0.0, step=3)
    run = store.run_named("lp")
    assert run is not None
    means = [s.mean_logprob for s in training_steps(store, run.id)]
    assert means[0] == pytest.approx((-1.0 * 3 - 3.0 * 1) / 4)
    assert means[1] == pytest.approx(-2.0)
    assert means[2] == pytest.approx(-1.5)
    assert means[3] is None


def test_training_and_groups_class_an_overflowing_group_alike(store: Store) -> None:
    # Rewards whose squares overflow the SQL sums: a spread neither page may call none.
    with Recorder(store, run="huge", kind="training") as rec:
        for reward in (1.5e308, 1.6e308, 0.0):
            rec.episode(question="Q", turns=TURNS, reward=reward, step=0)
    run = store.run_named("huge")
    assert run is not None
    (step,) = training_steps(store, run.id)
    (group,) = store.group_overview(run.id, limit=10).groups
    assert step.by_source["none"] == 0 and group.source != "none"
    assert step.frac_reward_zero_std == 0.0
    assert step.reward_std == group.std == math.inf
