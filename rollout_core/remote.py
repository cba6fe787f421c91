"""Episodes played against an environment server (`rollscope env-server`) instead of in
process: the policy generates here, the server plays each step and records it.

The loop keeps what the policy needs (each episode's conversation, in the prompt format of
`rollout_core.prompts`) and sends each output as `raw_output`, which the server parses as the
runner does; it reads back the same records the runner would have made, for
`rollout_core.compat`. It speaks OpenEnv's protocol through `GenericEnvClient` (the `env`
extra), imported only when a URL is given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_core.environment import SQLObservation
from rollout_core.parse import parse_model_output
from rollout_core.policies.base import Completion, Policy, PolicyRequest
from rollout_core.prompts import format_observation, initial_messages
from rollout_core.records import EpisodeKey, EpisodeRecord, Question, StepRecord


@dataclass(frozen=True, slots=True)
class RemoteTask:
    """One episode to play on the server: a question by id, with its seed."""

    question_id: str
    seed: int


@dataclass
class RemoteEpisode:
    """An episode played on the server, as the records the runner would have made."""

    key: EpisodeKey
    """The episode as the server numbered it in its run."""
    steps: list[StepRecord] = field(default_factory=list)
    record: EpisodeRecord | None = None


def play_remote(
    url: str,
    tasks: Sequence[RemoteTask],
    policy: Policy,
    *,
    batch_size: int = 32,
    token: str | None = None,
) -> list[RemoteEpisode]:
    """Play `tasks` on the server at `url`, `batch_size` sessions in lockstep, one policy call
    per iteration; the episodes in the order of `tasks`."""
    from openenv.core.generic_client import GenericEnvClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    clients = [
        GenericEnvClient(base_url=url, headers=headers).sync()
        for _ in range(max(1, min(batch_size, len(tasks))))
    ]
    played: list[RemoteEpisode] = []
    queue = deque(tasks)
    live: list[_Live] = []
    try:
        while queue or live:
            while queue and clients:
                live.append(_Live.begin(clients.pop(), queue.popleft()))
                played.append(live[-1].episode)
            completions = policy.generate([e.request() for e in live])
            still = []
            for episode, completion in zip(live, completions, strict=True):
                if episode.play(completion):
                    clients.append(episode.client)
                else:
                    still.append(episode)
            live = still
    finally:
        for client in clients + [e.client for e in live]:
            client.close()
    return played


@dataclass
class _Live:
    client: Any
    task: RemoteTask
    episode: RemoteEpisode
    question: Question
    tables: tuple[str, ...]
    messages: list[dict[str, str]]
    steps_left: int

    @classmethod
    def begin(cls, client: Any, task: RemoteTask) -> _Live:
        opened = client.reset(question_id=task.question_id, seed=task.seed).observation
        obs = _observation(opened)
        meta = opened.get("metadata") or {}
        key = EpisodeKey(task.question_id, int(meta.get("sample_index", 0)))
        return cls(
            client=client,
            task=task,
            episode=RemoteEpisode(key),
            question=Question(task.question_id, obs.db_id, obs.question, gold_sql=""),
            tables=tuple(obs.tables),
            messages=initial_messages(obs, obs.steps_left),
            steps_left=obs.steps_left,
        )

    def request(self) -> PolicyRequest:
        return PolicyRequest(
            messages=list(self.messages),
            question=self.question,
            db_path=Path(self.question.db_id),
            step_no=len(self.episode.steps) + 1,
            seed=self.task.seed,
            tables=self.tables,
            steps_left=self.steps_left,
            episode=self.episode.key,
        )

    def play(self, completion: Completion) -> bool:
        """Send one output; True when the episode ended."""
        text = completion.text
        result = self.client.step({"raw_output": text})
        obs = _observation(result.observation, done=bool(result.done))
        action = parse_model_output(text)
        shown = format_observation(obs)
        key = self.episode.key
        self.episode.steps.append(
            StepRecord(
                key.question_id,
                key.sample_index,
                step_no=obs.step,
                prompt=tuple(self.messages),
                raw_output=text,
                action=action.action_type,
                argument=action.argument,
                parsed=action.parsed,
                observation=shown,
                error=obs.error,
                reward=float(result.reward or 0.0),
                done=obs.done,
                tokens_in=completion.tokens_in,
                tokens_out=completion.tokens_out,
                tokens=completion.tokens,
                truncated=completion.truncated,
            )
        )
        self.messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": shown},
        ]
        self.steps_left = obs.steps_left
        if not obs.done:
            return False
        meta = result.observation.get("metadata") or {}
        self.episode.record = EpisodeRecord(
            key.question_id,
            key.sample_index,
            outcome=meta.get("outcome", "budget_exhausted"),
            reward=float(meta.get("total_reward", 0.0)),
            progress=float(meta.get("progress", 0.0)),
            operational=float(meta.get("operational", 0.0)),
            steps=obs.step,
            answer=None,
            duration_seconds=0.0,
            failure_class=meta.get("failure_class"),
        )
        return True


def _observation(data: dict[str, Any], *, done: bool = False) -> SQLObservation:
    """The engine's observation from the server's JSON (the fields `prompts` formats)."""
    return SQLObservation(
        question=str(data.get("question", "")),
        result=str(data.get("result", "")),
        error=data.get("error"),
        reward=0.0,
        done=done,
        step=int(data.get("step", 0)),
        tables=list(data.get("tables") or []),
        db_id=str(data.get("db_id", "")),
        evidence=data.get("evidence"),
        steps_left=int(data.get("steps_left", 0)),
    )
