"""How TRL's GRPOTrainer scored the rollouts rollscope played for it, read back once it has.

TRL calls its reward functions on what the rollout function returns, then computes each
rollout's advantage. It keeps the generation batch's prompts, each reward function's values and
the advantages in `trainer._logs` (what `log_completions=True` writes to its completions
files), gathered over the processes in process order. The rollout function reads them back for
its last call's episodes at the end of the optimizer step or evaluation that played them (or,
failing that, when the trainer next asks for rollouts or ends), and records them
(`storage.trainer_scores`): the GRPO groups and Training pages then count a group as learning
signal by the advantages the trainer gave, not by the environment's reward, which the trainer's
reward functions may not follow.

`_logs` is TRL's own, of the release `pyproject.toml` pins (its test holds the recorded
advantages to TRL's completions files). Where it is not as expected (another release, a batch
it no longer holds), nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rollout_core.records import EpisodeKey
from storage.trainer_scores import TrainerScore

ScoredAs = tuple[EpisodeKey, list[dict[str, Any]]]
"""An environment's last episode, and its prompt as the trainer logs it."""


@dataclass(frozen=True, slots=True)
class PlayedBatch:
    """One rollout call's prompts, as the trainer passed them, and the episodes played."""

    prompts: Sequence[Any]
    episode_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Scored:
    """One rollout of a batch as the trainer scored it."""

    advantage: float
    rewards: dict[str, float]
    """Each reward function's value by the trainer's name for it."""


def batch_scores(trainer: Any, prompts: Sequence[Any]) -> list[Scored] | None:
    """The trainer's scores of the last batch it scored, in order, where that batch's prompts
    (this process's share) are `prompts`; None where its log does not hold that batch."""
    logs = getattr(trainer, "_logs", None)
    if not isinstance(logs, dict):
        return None
    n = len(prompts)
    accelerator = trainer.accelerator
    total = n * int(accelerator.num_processes)
    mine = slice(int(accelerator.process_index) * n, int(accelerator.process_index) * n + n)

    def last(values: Any) -> list[Any] | None:
        held = list(values)[-total:]
        return held[mine] if len(held) == total else None

    logged = last(logs.get("prompt", ()))
    advantages = last(logs.get("advantages", ()))
    rewards = {str(name): last(values) for name, values in dict(logs.get("rewards", {})).items()}
    if logged is None or advantages is None or any(v is None for v in rewards.values()):
        return None
    if logged != list(prompts):  # not the batch played: nothing to pair
        return None
    return [
        Scored(
            float(advantages[i]),
            {name: float(values[i]) for name, values in rewards.items() if values is not None},
        )
        for i in range(n)
    ]


def read_scores(trainer: Any, played: PlayedBatch) -> list[TrainerScore]:
    """The trainer's scores of `played`, the last batch it scored; [] where its log does not
    hold that batch."""
    scored = batch_scores(trainer, played.prompts)
    if scored is None:
        return []
    return [
        TrainerScore(episode_id, s.advantage, s.rewards)
        for episode_id, s in zip(played.episode_ids, scored, strict=True)
    ]


def last_batch(trainer: Any, mine: Callable[[Any], ScoredAs | None]) -> list[ScoredAs] | None:
    """The trainer's last batch of tool-calling rollouts (`trainer.environments`, in the order
    of its log), each environment as `mine` names its episode; None unless `mine` names one
    for every environment of it."""
    played = [mine(env) for env in getattr(trainer, "environments", None) or ()]
    if not played or any(p is None for p in played):
        return None
    return [p for p in played if p is not None]


def logged_prompt(prompt: Any, added: str) -> list[dict[str, Any]] | None:
    """A row's chat prompt as TRL's trainer logs it once an environment's `reset` returned
    `added`: appended to the last message's text. None for a prompt of another form (no
    scores are paired then)."""
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[-1], dict):
        return None
    last = prompt[-1]
    if not isinstance(last.get("content"), str):
        return None
    return [*prompt[:-1], {**last, "content": last["content"] + added}]
