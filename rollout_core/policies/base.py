"""What a policy is, and the registry that builds one from a spec string.

Every policy, built-in or added, registers a factory under a name; `hf:` factories import
torch inside the function, so importing rollout_core never pulls in the GPU stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rollout_core.records import Question

Messages = list[dict[str, str]]


class PolicyError(RuntimeError):
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
    """The episode's seed."""
    tables: tuple[str, ...] = ()
    steps_left: int = 1
    """Actions left including this one."""
    episode: str = ""
    """A key unique to the episode within the run, for policies that keep per-episode state."""


@dataclass(frozen=True, slots=True)
class Completion:
    """A policy's output for one request."""

    text: str
    tokens_in: int | None = None
    tokens_out: int | None = None


class Policy(Protocol):
    """Turns a batch of requests into one completion each, in order."""

    name: str

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]: ...

    def describe(self) -> dict[str, Any]:
        """Settings recorded with the run (model, device, dtype, sampling)."""
        ...


PolicyFactory = Callable[[str | None, dict[str, Any]], Policy]
_REGISTRY: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make `name` or `name:ARG` specs build policies through `factory(arg, options)`."""
    _REGISTRY[name] = factory


def policy_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def split_spec(spec: str) -> tuple[str, str | None]:
    """`hf:/path` -> ("hf", "/path"); `oracle` -> ("oracle", None)."""
    name, sep, arg = spec.partition(":")
    return name.strip().lower(), (arg if sep else None)


def make_policy(spec: str, **options: Any) -> Policy:
    """Build the policy a spec names, e.g. `oracle`, `random`, `hf:./checkpoint-1000`."""
    _load_builtins()
    name, arg = split_spec(spec)
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(f"{n}:PATH" if n == "hf" else n for n in sorted(_REGISTRY))
        raise PolicyError(f"unknown policy {spec!r} (choose one of: {known})")
    return factory(arg, options)


def _load_builtins() -> None:
    # Imported here so the registry module itself stays free of the built-ins' imports.
    from rollout_core.policies import builtin  # noqa: F401
