"""What a policy is: the requests it answers, the completions it returns, its protocol.

Building one from a spec string is the registry's job (`rollout_core.policies.registry`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rollout_core.errors import RollscopeError
from rollout_core.records import EpisodeKey, PolicyInfo, Question, TokenTrace

Messages = list[dict[str, str]]


class PolicyError(RollscopeError, RuntimeError):
    """A policy could not be built or failed to generate; the message says why."""


class PolicyOutOfMemory(PolicyError):
    """The accelerator ran out of memory for this batch; a smaller batch may fit."""


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """One live episode's turn: the conversation so far and what scripted policies may peek at."""

    messages: Messages
    question: Question
    db_path: Path
    step_no: int
    """The step about to be taken, 1-based."""
    seed: int
    """The episode's seed: sampled outputs depend on it and `step_no` alone, never on the batch."""
    tables: tuple[str, ...] = ()
    steps_left: int = 1
    """Actions left including this one."""
    episode: EpisodeKey | None = None
    """The episode within the run, for policies that keep per-episode state; None: keep none."""

    @property
    def step_seed(self) -> int:
        """A seed for this step alone (episode seed and step number), for backends that take one
        per request (servers, vLLM): sampled outputs then repeat whatever the batching."""
        return zlib.crc32(f"{self.seed}:{self.step_no}".encode()) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Completion:
    """A policy's output for one request."""

    text: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens: TokenTrace | None = None
    """Per-token pieces, log-probabilities and entropies, when the policy records them."""
    truncated: bool | None = None
    """True when generation stopped at `max_new_tokens` rather than at an end token; None
    where nobody can tell (a text its producer gave without saying how it ended)."""
    cached_tokens: int | None = None
    """Prompt tokens served from a cache instead of being computed again, when known."""


class Policy(Protocol):
    """Turns a batch of requests into one completion each, in order."""

    name: str
    tokenizer: Any
    """The model's tokenizer (a `TokenCounter`), or None: observations are capped in its tokens."""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]: ...

    def describe(self) -> PolicyInfo:
        """What the policy is (model class, size, device and dtype chosen); recorded apart
        from the run's settings and never fed back as input."""
        ...

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """Forget the state kept for finished episodes (a no-op for stateless policies)."""
        ...
