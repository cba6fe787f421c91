"""A fork's start: re-execute a recorded episode's first steps, checking the environment agrees.

The fork's policy must take over in exactly the state the source episode was in, so the recorded
actions are executed again (not just copied) and every observation and reward is compared with
the record. When they differ (the database changed on disk, the dataset's gold query changed)
the replay stops there and says so; the runner ends that episode in `error` rather than let the
new policy continue from a state the source never saw.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass

from rollout_core.actions import SQLAction
from rollout_core.environment import SQLEnvironment
from rollout_core.policies.base import Messages
from rollout_core.prompts import format_observation
from rollout_core.records import RecordedStep, StepRecord

# `SQLEnvironment._cap` ends a cut observation with this line; another tokenizer (the fork's
# policy's) cuts the same text elsewhere, so a cut observation matches on its kept start.
_CUT_MARK = re.compile(r"\n\.\.\. \(cut at \d+ tokens\)\Z")
_REWARD_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class ForkStart:
    """How a forked episode begins: the source's recorded steps, then its own policy's turn."""

    source_episode: int
    """The recorded episode's id (kept on the new episode as `forked_from`)."""
    steps: tuple[RecordedStep, ...]
    """Steps 1 .. k-1 of the source, replayed in order; empty to fork at step 1."""
    prompt: str | None = None
    """The conversation the source's model saw at step k, when recorded: the new policy sees
    exactly that. None rebuilds it from the replayed steps."""

    @property
    def step(self) -> int:
        """The first step the new policy plays."""
        return len(self.steps) + 1


@dataclass(frozen=True, slots=True)
class ReplayedPrefix:
    """What replaying a fork's recorded steps gave."""

    steps: list[StepRecord]
    """The steps that reproduced the record (flagged `replayed`), plus the first that did not."""
    messages: Messages
    """The conversation the new policy continues."""
    divergence: str | None = None
    """Why the replay stopped early; None when every step reproduced the record."""


def replay_prefix(
    env: SQLEnvironment,
    fork: ForkStart,
    messages: Messages,
    *,
    question_id: str,
    sample_index: int,
) -> ReplayedPrefix:
    """Execute `fork.steps` in `env` (just reset; `messages` its opening conversation)."""
    messages = list(messages)
    records: list[StepRecord] = []
    for no, rec in enumerate(fork.steps, start=1):
        t0 = time.perf_counter()
        obs = env.step(SQLAction(rec.action, rec.argument, rec.parsed))
        env_dt = time.perf_counter() - t0
        observation = format_observation(obs)
        problem = _difference(rec, observation, obs.error, obs.reward, obs.done, no, fork.step)
        records.append(
            StepRecord(
                question_id=question_id,
                sample_index=sample_index,
                step_no=no,
                prompt=rec.prompt,
                raw_output=rec.raw_output,
                action=rec.action,
                argument=rec.argument,
                parsed=rec.parsed,
                # The conversation holds the text the source's model read (see matches()).
                observation=rec.observation if problem is None else observation,
                error=obs.error,
                reward=obs.reward,
                done=problem is not None,
                env_seconds=env_dt,
                replayed=True,
            )
        )
        if problem is not None:
            return ReplayedPrefix(records, messages, problem)
        messages.append({"role": "assistant", "content": rec.raw_output})
        messages.append({"role": "user", "content": rec.observation})
    recorded = _messages(fork.prompt)
    return ReplayedPrefix(records, recorded if recorded is not None else messages)


def observations_match(recorded: str, replayed: str) -> bool:
    """Equal, or equal up to where a token cap cut one of them (the cut one's kept text begins
    the other: another tokenizer cuts the same text at another place)."""
    if recorded == replayed:
        return True
    kept_a, cut_a = _uncut(recorded)
    kept_b, cut_b = _uncut(replayed)
    if not (cut_a or cut_b):
        return False
    short, long = sorted((kept_a, kept_b), key=len)
    # A cut inside a multi-byte character decodes to U+FFFD.
    return long.startswith(short.rstrip("\ufffd"))


def _uncut(text: str) -> tuple[str, bool]:
    found = _CUT_MARK.search(text)
    return (text[: found.start()], True) if found else (text, False)


def _difference(
    rec: RecordedStep,
    observation: str,
    error: str | None,
    reward: float,
    done: bool,
    no: int,
    fork_step: int,
) -> str | None:
    """Why a replayed step does not reproduce the record; None when it does."""
    where = f"replayed step {no} ({rec.action} {_short(rec.argument)})"
    hint = "the database or the dataset changed since the source run"
    if not observations_match(rec.observation, observation):
        return f"{where} gave another observation than recorded: {hint}"
    if (error is None) != (rec.error is None):
        return f"{where} {'failed' if error else 'succeeded'} where the record did not: {hint}"
    if not math.isclose(reward, rec.reward, rel_tol=0.0, abs_tol=_REWARD_TOLERANCE):
        return f"{where} earned reward {reward:+.3f}, the record {rec.reward:+.3f}: {hint}"
    if done:
        return f"{where} ended the episode before step {fork_step}: {hint}"
    return None


def _short(text: str, width: int = 40) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _messages(prompt: str | None) -> Messages | None:
    """A recorded prompt as chat messages; None when it is not JSON messages (rendered text)."""
    if prompt is None:
        return None
    try:
        value = json.loads(prompt)
    except ValueError:
        return None
    if not isinstance(value, list) or not value:
        return None
    ok = all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )
    return [{"role": m["role"], "content": m["content"]} for m in value] if ok else None
