"""Each training episode as one token sequence: exactly the ids the model saw and wrote.

A trainer scores the tokens it is given; if a multi-turn conversation is rendered to text and
encoded again each turn, a model turn can come back as other ids than the ones sampled (a
tokenizer has many ways to spell a text; whitespace around an output is trimmed), and the
sampled tokens' log-probabilities no longer belong to the sequence trained on. So every turn
extends the episode's own ids instead: the prompt's ids, then each model turn's sampled ids, then
the ids of the environment's reply as the chat template renders it, which end with the next
generation prompt. The policy is handed these ids as its prompt (`HFPolicy(encoder=...)`), so
the model conditions on exactly the sequence the trainer will score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollout_core.policies.base import PolicyRequest
from rollout_core.records import EpisodeKey, StepRecord

_MARK = "<<rollscope-model-turn>>"
"""Stands in for a model turn when rendering the text that follows one (any unlikely text)."""


class ConversationTooLong(RuntimeError):
    """An episode outgrew the model's context; the message names the settings to lower."""


@dataclass
class EpisodeTokens:
    """One episode's ids: the first prompt, then model and environment tokens in order."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    """The sampled token's log-probability at model tokens, 0.0 at environment tokens."""
    env_mask: list[int] = field(default_factory=list)
    """1 at model tokens, 0 at environment tokens."""

    @property
    def context(self) -> list[int]:
        """What the model reads next: everything so far."""
        return self.prompt_ids + self.completion_ids


class TurnTokens:
    """Builds every live episode's ids turn by turn; the policy's prompt encoder.

    Call it with a batch of requests for their prompt ids; `record` each step the runner wrote,
    before the next batch; `pop` a finished episode's sequence.
    """

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int], max_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.max_prompt_tokens = max_prompt_tokens
        self.episodes: dict[EpisodeKey, EpisodeTokens] = {}

    def __call__(self, requests: Sequence[PolicyRequest]) -> list[list[int]]:
        rows = []
        for req in requests:
            if req.episode is None:
                raise ValueError("a training episode's request must name its episode")
            known = self.episodes.get(req.episode)
            if known is None:
                known = EpisodeTokens(self.encode(self.render(req.messages, generation=True)))
                self.episodes[req.episode] = known
            ids = known.context
            if len(ids) > self.max_prompt_tokens:
                raise ConversationTooLong(
                    f"episode {req.episode} reached {len(ids)} prompt tokens, more than the "
                    f"model's context leaves ({self.max_prompt_tokens}); lower step_budget, "
                    "max_new_tokens or max_observation_tokens"
                )
            rows.append(ids)
        return rows

    def record(self, step: StepRecord) -> None:
        """Add a step's model turn and, unless the episode ended or nothing answered, the
        environment's reply."""
        episode = self.episodes[step.key]
        if step.tokens is None or step.tokens.ids is None or step.tokens.logprobs is None:
            raise ValueError("the policy recorded no token ids and log-probabilities")
        ids = list(step.tokens.ids)
        episode.completion_ids += ids
        episode.logprobs += [float(x) for x in step.tokens.logprobs[: len(ids)]]
        episode.env_mask += [1] * len(ids)
        if step.done or step.observation is None:
            return
        ended = bool(ids) and ids[-1] in self.eos_ids
        reply = self.reply_ids(step.observation, closed_by=ids[-1] if ended else None)
        episode.completion_ids += reply
        episode.logprobs += [0.0] * len(reply)
        episode.env_mask += [0] * len(reply)

    def pop(self, key: EpisodeKey) -> EpisodeTokens:
        return self.episodes.pop(key)

    def reply_ids(self, observation: str, *, closed_by: int | None) -> list[int]:
        """The ids after a model turn: the template's end of that turn (less the end token the
        model wrote, `closed_by`), the observation as a user message, the generation prompt."""
        text = self.render(
            [
                {"role": "user", "content": "?"},
                {"role": "assistant", "content": _MARK},
                {"role": "user", "content": observation},
            ],
            generation=True,
        )
        after = text[text.index(_MARK) + len(_MARK) :]
        if closed_by is not None:
            end = self.tokenizer.decode([closed_by], skip_special_tokens=False)
            if end and after.startswith(end):
                after = after[len(end) :]
        return self.encode(after)

    def render(self, messages: list[dict[str, str]], *, generation: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation, tokenize=False
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))
