"""The settings dataclasses refuse NaN, infinities and whole numbers past 32 bits, whichever
face builds them (a training integration, a stored spec), and an hf policy its context's end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rollout_core.errors import SpecError
from rollout_core.policies.base import PolicyError
from rollout_core.policies.hf.policy import HFPolicy, pick_device
from rollout_core.records import RunSpec
from rollout_core.sandbox import SandboxLimits
from rollout_core.settings import (
    EndpointSettings,
    EnvironmentSettings,
    GenerationSettings,
    SettingsError,
    TrainingSettings,
)
from rollout_core.specs import RunRequest, SettingsRequest, build_spec


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TrainingSettings(learning_rate=math.nan), "learning_rate"),
        (lambda: TrainingSettings(max_steps=2**31), "max_steps"),
        (lambda: EndpointSettings("m", timeout_seconds=math.inf), "timeout_seconds"),
        (lambda: EndpointSettings("m", retry_seconds=math.nan), "retry_seconds"),
        (lambda: GenerationSettings(max_new_tokens=2**31), "max_new_tokens"),
        (lambda: EnvironmentSettings(sandbox=SandboxLimits(deadline_seconds=math.nan)),
         "deadline_seconds"),
        (lambda: SettingsRequest(query_timeout=math.nan).build(), "query_timeout"),
        (lambda: build_spec(RunRequest(samples=2**31)), "samples"),
        (lambda: build_spec(RunRequest(samples=20_000_000)), "samples"),  # x 121 questions
    ],
)  # fmt: skip
def test_numbers_no_run_can_hold_are_refused(make: object, field: str) -> None:
    with pytest.raises(SettingsError) as raised:
        make()  # type: ignore[operator]
    assert raised.value.field == field


def test_the_largest_32_bit_count_big_byte_limits_and_any_seed_are_kept() -> None:
    assert GenerationSettings(max_new_tokens=2**31 - 1).max_new_tokens == 2**31 - 1
    # A seed is hashed with each episode's key, never stored as a count.
    assert GenerationSettings(seed=2**40).seed == TrainingSettings(seed=2**40).seed == 2**40
    big = SandboxLimits(memory_budget_bytes=4 * 2**30)  # bytes, not a count the store keeps
    assert EnvironmentSettings(sandbox=big).sandbox.memory_budget_bytes == 4 * 2**30


def test_a_stored_spec_with_nan_is_refused_as_a_spec() -> None:
    stored = build_spec(RunRequest(limit=1)).spec.to_stored()
    stored["environment"]["sandbox"]["deadline_seconds"] = math.nan
    with pytest.raises(SpecError, match="deadline_seconds must be a finite number"):
        RunSpec.from_stored(stored)


def test_the_last_new_token_a_context_allows_leaves_the_prompt_one(tiny_checkpoint: Path) -> None:
    policy = HFPolicy(tiny_checkpoint, GenerationSettings(max_new_tokens=1023, device="cpu"))
    assert policy.max_prompt_tokens == 1
    with pytest.raises(PolicyError, match="context of 1024 tokens; give 1023 or fewer"):
        HFPolicy(tiny_checkpoint, GenerationSettings(max_new_tokens=1024, device="cpu"))


@pytest.mark.parametrize("device", ["tpu", "cuda:99", "not a device"])
def test_a_device_torch_cannot_use_is_a_policy_error(device: str) -> None:
    with pytest.raises(PolicyError, match=repr(device)):
        pick_device(device)
    assert pick_device("cpu").type == "cpu"
