"""Which training questions a checkpoint solves some of the time: the ones where a GRPO group
can hold right and wrong episodes, so training on them has a correctness signal."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from rollout_core.datasets import Dataset
from rollout_core.policies.registry import make_policy
from rollout_core.records import ListSink
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings, GenerationSettings


@dataclass(frozen=True, slots=True)
class Solved:
    """How often a question was answered right in the probe."""

    question_id: str
    correct: int
    episodes: int
    reward: float
    """Mean episode reward (correctness plus the shaping terms)."""

    @property
    def rate(self) -> float:
        return self.correct / self.episodes


def probe(
    checkpoint: Path,
    dataset: Dataset,
    *,
    samples: int,
    generation: GenerationSettings,
    environment: EnvironmentSettings,
) -> list[Solved]:
    """Play every question of `dataset` `samples` times with `checkpoint`; in dataset order."""
    sink = ListSink()
    tasks = plan_episodes(dataset.questions, samples=samples, run_seed=generation.seed)
    policy = make_policy(f"hf:{checkpoint.resolve()}", generation)
    run_episodes(
        dataset, tasks, policy, sink, batch_size=generation.batch_size, environment=environment
    )
    correct: dict[str, int] = defaultdict(int)
    played: dict[str, int] = defaultdict(int)
    rewards: dict[str, float] = defaultdict(float)
    for episode in sink.episodes:
        qid = episode.question_id
        played[qid] += 1
        correct[qid] += episode.outcome == "correct"
        rewards[qid] += episode.reward
    return [
        Solved(q.id, correct[q.id], played[q.id], rewards[q.id] / played[q.id])
        for q in dataset.questions
        if played[q.id]
    ]


def sometimes_solved(found: list[Solved], count: int) -> list[str]:
    """`count` question ids, those solved closest to half the time first; ties go to the higher
    mean reward, then dataset order. Questions always or never solved fill up the rest only
    when too few are mixed."""
    ranked = sorted(
        range(len(found)),
        key=lambda i: (abs(found[i].rate - 0.5), -found[i].reward, i),
    )
    return [found[i].question_id for i in ranked[:count]]
