"""The Training page's log-probability per step, from a Recorder's episodes: token-weighted
where every episode says how many tokens it wrote, the episodes' mean where some do not
(a loop may know the mean alone)."""

from __future__ import annotations

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
