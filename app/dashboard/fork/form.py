"""Replay's "continue from this step with…": the form's choices checked and a queued fork made.

The policy choices are Launch's (`app.dashboard.launch.form`: scripted policies, checkpoints under
the roots, a typed checkpoint directory, all checked against the roots the same way); the fork
itself is planned by `app.forks`, as `rollscope fork` plans it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.dashboard.launch.form import (
    OTHER_CHECKPOINT,
    SCRIPTED_POLICIES,
    LaunchError,
    find_checkpoints,
    form_policy,
    resolve_policy,
)
from app.forks import ForkRequest, queue_episode_fork
from rollout_core.errors import RollscopeError
from storage.store import Store

MAX_TEMPERATURE = 2.0


@dataclass(frozen=True, slots=True)
class ForkForm:
    """The fork form's fields, as chosen."""

    policy: str
    """A choice of `policy_choices`."""
    temperature: float
    checkpoint: str = ""
    """The directory typed for `OTHER_CHECKPOINT` (ignored for any other choice)."""


def policy_choices(checkpoint_roots: Sequence[Path]) -> list[str]:
    """What the form offers: Launch's scripted policies, checkpoints and a typed directory."""
    found = [f"hf:{p}" for p in find_checkpoints(checkpoint_roots)]
    return [*SCRIPTED_POLICIES, *found, OTHER_CHECKPOINT]


def fork_request(form: ForkForm, checkpoint_roots: Sequence[Path]) -> ForkRequest:
    """The fork to make; LaunchError (per field) for a policy outside the roots or a bad
    temperature."""
    errors: dict[str, str] = {}
    policy = ""
    try:
        # The directory field counts for a typed checkpoint only: left filled in from an
        # earlier choice, it must not turn another choice away.
        typed = form.checkpoint if form.policy == OTHER_CHECKPOINT else ""
        policy = resolve_policy(form_policy(form.policy, typed), checkpoint_roots)
    except LaunchError as exc:
        errors.update(exc.errors)
    if not 0.0 <= form.temperature <= MAX_TEMPERATURE:
        errors["temperature"] = (
            f"temperature must be between 0 and {MAX_TEMPERATURE:g}, got {form.temperature}"
        )
    if errors:
        raise LaunchError(next(iter(errors.values())), errors=errors)
    return ForkRequest(policy=policy, generation={"temperature": float(form.temperature)})


def queue_fork(
    store: Store, episode_id: int, step: int, form: ForkForm, checkpoint_roots: Sequence[Path]
) -> int:
    """Check the form and create the queued fork run of one episode at `step`; its id.
    LaunchError names the field at fault (`form` for a fork that cannot be made)."""
    request = fork_request(form, checkpoint_roots)
    try:
        return queue_episode_fork(store, episode_id, step, request)
    except RollscopeError as exc:  # a ForkError, or the run's dataset gone from its path
        raise LaunchError(str(exc)) from None
