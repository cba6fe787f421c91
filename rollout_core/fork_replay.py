"""A fork's start: re-execute a recorded episode's first steps, checking the environment agrees.

The fork's policy must take over in exactly the state the source episode was in, so the recorded
actions are executed again (not just copied) and every observation and reward is compared with
the record. When they differ (the database changed on disk, the dataset's gold query changed)
the replay stops there and says so; the runner ends that episode in `error` rather than let the
new policy continue from a state the source never saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rollout_core.actions import SQLAction
from rollout_core.clip import clip
from rollout_core.episode import LiveEpisode, observations_match
from rollout_core.records import ChatMessage, StepRecord

_REWARD_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class ForkStart:
    """How a forked episode begins: the source's recorded steps, then its own policy's turn."""

    source_episode: int
    """The recorded episode's id (kept on the new episode as `forked_from`)."""
    steps: tuple[StepRecord, ...]
    """Steps 1 .. k-1 of the source, replayed in order; empty to fork at step 1."""
    prompt: Sequence[ChatMessage] | None = None
    """The messages the source's model saw at step k, when recorded: the new policy sees
    exactly those. None (or empty) continues the conversation the replay built."""

    @property
    def step(self) -> int:
        """The first step the new policy plays."""
        return len(self.steps) + 1


def replay_prefix(episode: LiveEpisode, fork: ForkStart) -> tuple[list[StepRecord], str | None]:
    """Play `fork.steps` again in a just-begun episode: (the step records, flagged `replayed`;
    why the replay stopped early, None when every step reproduced the record). On success the
    episode's conversation is the one the source's model saw at the fork step."""
    records: list[StepRecord] = []
    for rec in fork.steps:
        # A step recorded without an action (an import's) is played as its text parses.
        acted = None
        if rec.action is not None and rec.argument is not None:
            acted = SQLAction(rec.action, rec.argument, rec.parsed)
        step = episode.play(rec.raw_output, action=acted, recorded=rec)
        problem = _difference(rec, step, fork.step)
        if problem is not None:
            return [*records, _ended(step)], problem
        records.append(step)
    if fork.prompt and episode.messages is not None:
        episode.messages[:] = [dict(m) for m in fork.prompt]
    return records, None


def _ended(step: StepRecord) -> StepRecord:
    """The step where the replay diverged: it ends the episode."""
    return replace(step, done=True)


def _difference(rec: StepRecord, step: StepRecord, fork_step: int) -> str | None:
    """Why a replayed step does not reproduce the record; None when it does."""
    where = f"replayed step {rec.step_no} ({rec.action or 'no action'} {_short(rec.acted_on)})"
    hint = "the database or the dataset changed since the source run"
    if not observations_match(rec.observation, step.observation):
        return f"{where} gave another observation than recorded: {hint}"
    if (step.error is None) != (rec.error is None):
        return f"{where} {'failed' if step.error else 'succeeded'} where the record did not: {hint}"
    if not math.isclose(step.reward, rec.reward, rel_tol=0.0, abs_tol=_REWARD_TOLERANCE):
        return f"{where} earned reward {step.reward:+.3f}, the record {rec.reward:+.3f}: {hint}"
    if step.done:
        return f"{where} ended the episode before step {fork_step}: {hint}"
    return None


def _short(text: str, width: int = 40) -> str:
    return clip(" ".join(text.split()), width)
