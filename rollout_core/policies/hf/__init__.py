"""A local transformers checkpoint as a policy: batched `generate` with per-episode caches.

Importing this package imports torch and transformers; the registry does so only on use.
"""

from rollout_core.policies.hf.policy import HFPolicy

__all__ = ["HFPolicy"]
