"""GRPO group statistics agree with TRL's computation (torch's std, epsilon 1e-4)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_core import grpo

# Episode rewards are sums of 1.0, 0.1 x an overlap and -0.01 penalties: four decimals.
rewards_lists = st.lists(
    st.integers(-2000, 12000).map(lambda x: x / 10_000), min_size=2, max_size=16
)


@settings(deadline=None)  # the first example imports torch
@given(rewards_lists)
def test_advantages_are_trls(rewards: list[float]) -> None:
    torch = pytest.importorskip("torch")
    r = torch.tensor(rewards, dtype=torch.float64)
    std = r.std()  # unbiased, as GRPOTrainer's rewards.view(-1, G).std(dim=1)
    expected = ((r - r.mean()) / (std + 1e-4)).tolist()
    got = grpo.advantages(rewards)
    if min(rewards) == max(rewards):
        assert got == [0.0] * len(rewards)
    else:
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert grpo.group_std(rewards) == pytest.approx(float(std), rel=1e-9, abs=1e-12)


@given(rewards_lists)
def test_the_std_from_sql_sums_matches_the_two_pass_one(rewards: list[float]) -> None:
    std = grpo.std_from_sums(
        len(rewards), sum(rewards), sum(r * r for r in rewards), min(rewards), max(rewards)
    )
    assert std == pytest.approx(grpo.group_std(rewards), abs=1e-6)
    assert (std == 0.0) == (min(rewards) == max(rewards))


def test_a_zero_variance_group_has_no_signal_even_with_float_noise_in_its_mean() -> None:
    rewards = [0.1, 0.1, 0.1]  # fsum / 3 is not exactly 0.1
    assert grpo.group_std(rewards) == 0.0
    assert grpo.advantages(rewards) == [0.0, 0.0, 0.0]
    assert grpo.std_from_sums(3, 0.3, 0.03, 0.1, 0.1) == 0.0


def test_a_single_sample_has_no_standard_deviation_and_no_advantage() -> None:
    assert grpo.group_std([1.0]) == 0.0
    assert grpo.advantages([1.0]) == [0.0]


def test_one_right_of_four_gets_the_largest_advantage() -> None:
    adv = grpo.advantages([1.0, 0.0, 0.0, 0.0])
    std = math.sqrt(0.25)  # sample std of (1, 0, 0, 0): sqrt(0.75 / 3)
    assert adv[0] == pytest.approx(0.75 / (std + 1e-4))
    assert adv[1:] == [pytest.approx(-0.25 / (std + 1e-4))] * 3


def test_a_groups_spread_comes_from_correctness_shaping_or_nothing() -> None:
    # Right and wrong samples: correctness. All right, or none, yet rewards that differ: the
    # shaping terms alone. Equal rewards: nothing, whatever the answers.
    assert grpo.signal_source(4, 2, 0.5) == "correctness"
    assert grpo.signal_source(4, 0, 0.01) == "shaping only"
    assert grpo.signal_source(4, 4, 0.05) == "shaping only"
    assert grpo.signal_source(4, 0, 0.0) == "none"
    assert grpo.signal_source(4, 4, 0.0) == "none"
    assert grpo.signal_source(1, 1, 0.0) == "none"
    assert set(grpo.SIGNAL_SOURCES) == {"correctness", "shaping only", "none"}


def test_the_trainers_advantages_decide_whether_a_group_has_signal() -> None:
    # A trainer rewarding correctness alone gave a shaping spread no advantage; one with its
    # own terms spread rewards the environment gave alike. A rounding error is no advantage.
    assert grpo.signal_source(4, 0, 0.01, trainer_advantage=0.0) == "none"
    assert grpo.signal_source(4, 0, 0.01, trainer_advantage=1e-5) == "none"
    assert grpo.signal_source(4, 0, 0.0, trainer_advantage=0.8) == "shaping only"
    assert grpo.signal_source(4, 2, 0.0, trainer_advantage=0.8) == "correctness"
    assert grpo.signal_source(4, 2, 0.5, trainer_advantage=None) == "correctness"


@pytest.mark.parametrize(
    ("rewards", "std", "advantages"),
    [
        # Squares past the float's range: 1e155 ** 2 raised OverflowError.
        ([1e155, -1e155, 0.0], 1e155, [1.0, -1.0, 0.0]),
        # A sum past it: fsum raised on the way.
        ([1e308, 1e308, -1e308], 2 / 3**0.5 * 1e308, [3**-0.5, 3**-0.5, -(2 / 3**0.5)]),
    ],
)
def test_rewards_near_the_floats_limit_have_a_std_and_advantages(
    rewards: list[float], std: float, advantages: list[float]
) -> None:
    assert grpo.group_std(rewards) == pytest.approx(std, rel=1e-12)
    assert grpo.advantages(rewards) == pytest.approx(advantages, rel=1e-12)
