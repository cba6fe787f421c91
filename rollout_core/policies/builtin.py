"""The built-in policies, registered the same way an add-on would register its own."""

from __future__ import annotations

from typing import Any

from rollout_core.policies.base import Policy, PolicyError, register_policy


def _oracle(arg: str | None, options: dict[str, Any]) -> Policy:
    from rollout_core.policies.scripted import OraclePolicy

    return OraclePolicy()


def _random(arg: str | None, options: dict[str, Any]) -> Policy:
    from rollout_core.policies.scripted import RandomPolicy

    return RandomPolicy()


def _hf(arg: str | None, options: dict[str, Any]) -> Policy:
    if not arg:
        raise PolicyError("the hf policy needs a checkpoint: --policy hf:/path/to/checkpoint")
    from rollout_core.policies.hf import HFPolicy  # torch is imported only here

    return HFPolicy(arg, **options)


register_policy("oracle", _oracle)
register_policy("random", _random)
register_policy("hf", _hf)
