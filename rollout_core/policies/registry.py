"""Policy names -> lazy factories: `make_policy("hf:./ckpt", settings)` builds one.

Each entry names its factory as `module:function` and imports it on first use, so importing
rollout_core never pulls in torch, an HTTP client or vLLM. Built-in policies register here the
same way an add-on registers its own (`register_policy`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from rollout_core.policies.base import Policy, PolicyError
from rollout_core.settings import GenerationSettings

PolicyFactory = Callable[[str | None, GenerationSettings], Policy]


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One registered policy."""

    name: str
    factory: str | PolicyFactory
    """A callable, or `module:function` imported when the policy is first built."""
    arg: str | None = None
    """What goes after `name:` (e.g. `CHECKPOINT_DIR`); None when the policy takes nothing."""
    help: str = ""


_REGISTRY: dict[str, PolicyEntry] = {}


def register_policy(
    name: str, factory: str | PolicyFactory, *, arg: str | None = None, help: str = ""
) -> None:
    """Make `name` (or `name:ARG` when `arg` is given) build policies through `factory`."""
    _REGISTRY[name] = PolicyEntry(name, factory, arg, help)


def policy_entry(name: str) -> PolicyEntry | None:
    """The registered entry for a policy name, if any."""
    return _REGISTRY.get(name.strip().lower())


def split_spec(spec: str) -> tuple[str, str | None]:
    """`hf:/path` -> ("hf", "/path"); `oracle` -> ("oracle", None)."""
    name, sep, arg = spec.partition(":")
    return name.strip().lower(), (arg.strip() if sep else None)


def usage() -> str:
    """The accepted spellings, e.g. `oracle, random, hf:CHECKPOINT_DIR`."""
    return ", ".join(f"{e.name}:{e.arg}" if e.arg else e.name for e in _REGISTRY.values())


def check_spec(spec: str) -> tuple[PolicyEntry, str | None]:
    """The entry a spec names and its argument; PolicyError in one line when it is malformed."""
    name, arg = split_spec(spec)
    entry = _REGISTRY.get(name)
    if entry is None:
        raise PolicyError(f"unknown policy {spec!r} (choose one of: {usage()})")
    if entry.arg is not None and not arg:
        what = entry.arg.lower().replace("_", " ")
        raise PolicyError(f"the {name} policy needs a {what}: --policy {name}:{entry.arg}")
    if entry.arg is None and arg:
        raise PolicyError(f"the {name} policy takes no argument; use --policy {name}")
    return entry, arg


def make_policy(spec: str, settings: GenerationSettings | None = None) -> Policy:
    """Build the policy a spec names, e.g. `oracle`, `random`, `hf:./checkpoint-1000`."""
    entry, arg = check_spec(spec)
    factory = entry.factory
    if isinstance(factory, str):
        module, _, func = factory.partition(":")
        factory = getattr(importlib.import_module(module), func)
    return factory(arg, settings or GenerationSettings())


register_policy("oracle", "rollout_core.policies.scripted:oracle_policy", help="reads the gold SQL")
register_policy(
    "random", "rollout_core.policies.scripted:random_policy", help="seeded random actions"
)
register_policy(
    "hf",
    "rollout_core.policies.hf.policy:hf_policy",
    arg="CHECKPOINT_DIR",
    help="a local transformers checkpoint",
)
register_policy(
    "openai",
    "rollout_core.policies.openai.policy:openai_policy",
    arg="BASE_URL",
    help="an OpenAI-compatible chat server (give --model)",
)
register_policy(
    "vllm",
    "rollout_core.policies.vllm:vllm_policy",
    arg="CHECKPOINT",
    help="a checkpoint played in-process by vLLM on a GPU",
)
