"""One episode being played: the one place that steps the environment and builds the records.

Every producer plays its steps through `LiveEpisode`: the batched runner (a policy's output
parsed into an action), a fork (a recorded step executed again), a trainer's tool calls (the
action given directly). So every producer's records carry the same fields, the failure class
and the episode's token statistics included.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from rollout_core.actions import SQLAction
from rollout_core.environment import SQLEnvironment
from rollout_core.failure_classes import StepFacts, classify_episode
from rollout_core.parse import parse_model_output
from rollout_core.policies.base import Completion
from rollout_core.prompts import format_observation, initial_messages
from rollout_core.records import EpisodeRecord, EpisodeStart, Outcome, Question, StepRecord

# `SQLEnvironment` ends a cut observation with this line; another tokenizer (a fork's policy's)
# cuts the same text elsewhere, so a cut observation matches on its kept start.
_CUT_MARK = re.compile(r"\n\.\.\. \(cut at \d+ tokens\)\Z")


def start_record(
    question: Question,
    sample_index: int,
    seed: int | None,
    *,
    forked_from: int | None = None,
    fork_step: int | None = None,
    train_step: int | None = None,
    group_index: int | None = None,
) -> EpisodeStart:
    """The start record of one sample of a question, stamped now (call it at the reset);
    `seed`: its sampling's, None where rollscope did not sample it; the rest: fork and
    training fields."""
    return EpisodeStart(
        question.id,
        sample_index,
        seed,
        question.db_id,
        question.question,
        question.gold_sql,
        forked_from=forked_from,
        fork_step=fork_step,
        train_step=train_step,
        group_index=group_index,
        started_at=datetime.now(UTC),
    )


def failed_record(start: EpisodeStart, error: str) -> EpisodeRecord:
    """An episode that could not begin (its database or gold query broke at reset)."""
    ended = datetime.now(UTC)
    began = start.started_at
    return EpisodeRecord(
        start.question_id,
        start.sample_index,
        outcome="error",
        reward=0.0,
        progress=0.0,
        operational=0.0,
        steps=0,
        answer=None,
        duration_seconds=None if began is None else (ended - began).total_seconds(),
        error=error,
        failure_class=classify_episode("error", (), gold_seen=False),
        ended_at=ended,
    )


class LiveEpisode:
    """An episode from its reset to its record: the environment, the conversation, the facts
    the failure classifier reads and the token statistics, kept as each step is played."""

    def __init__(self, env: SQLEnvironment, start: EpisodeStart, *, conversation: bool = True):
        """Reset `env` to the start's question (raises what reset raises). With `conversation`
        the episode keeps the chat messages a model reads (system prompt, question, then each
        output and observation) and records them as each step's prompt; without it (a
        trainer's tool calls, whose prompt the trainer builds) steps record no prompt."""
        self.env = env
        self.start = start
        self.started = time.perf_counter()
        obs = env.reset(seed=start.seed, question_id=start.question_id)
        self.messages: list[dict[str, Any]] | None = (
            initial_messages(obs, env.step_budget) if conversation else None
        )
        self._facts: list[StepFacts] = []
        self._tokens = 0
        self._tokens_known = False
        self._logprob_sum = 0.0
        self._scored = 0

    @property
    def done(self) -> bool:
        return self.env.state.done

    @property
    def step_no(self) -> int:
        """The number of the step about to be played (1-based)."""
        return self.env.state.step_count + 1

    def play(
        self,
        output: str | Completion,
        *,
        action: SQLAction | None = None,
        policy_seconds: float | None = None,
        recorded: StepRecord | None = None,
    ) -> StepRecord:
        """Play one step: the action parsed from `output` (or `action`, when the producer
        gives it), the environment's answer, and the step's record.

        `recorded`: a fork replaying its source's step; the record keeps the source's prompt
        and, when the environment answers as it did then, the observation text the source's
        model read.
        """
        completion = output if isinstance(output, Completion) else Completion(output)
        text = completion.text
        if action is None:
            action = parse_model_output(text)
        prompt = self.messages if recorded is None else recorded.prompt
        prompt = tuple(prompt) if prompt is not None else ()
        t0 = time.perf_counter()
        obs = self.env.step(action)
        env_seconds = time.perf_counter() - t0
        observation = format_observation(obs)
        was = None if recorded is None else recorded.observation
        if was is not None and observations_match(was, observation):
            observation = was
        self._facts.append(StepFacts(action.action_type, action.argument, action.parsed, obs.error))
        self._count(completion)
        if self.messages is not None:
            self.messages.append({"role": "assistant", "content": text})
            self.messages.append({"role": "user", "content": observation})
        return StepRecord(
            self.start.question_id,
            self.start.sample_index,
            step_no=obs.step,
            prompt=prompt,
            raw_output=text,
            action=action.action_type,
            argument=action.argument,
            parsed=action.parsed,
            observation=observation,
            error=obs.error,
            reward=obs.reward,
            done=obs.done,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            policy_seconds=policy_seconds,
            env_seconds=env_seconds,
            tokens=completion.tokens,
            # A replayed step's output is its source's: cut where that one was.
            truncated=completion.truncated if recorded is None else recorded.truncated,
            cached_tokens=completion.cached_tokens,
            replayed=recorded is not None,
        )

    def finish(self, *, error: str | None = None, outcome: Outcome | None = None) -> EpisodeRecord:
        """The episode's record. `error` ends it in `error` whatever its state (a fork whose
        replay did not reproduce its source), `outcome` in that outcome (`abandoned`: its
        player left); an episode still open (a trainer stopped calling tools) ends as
        `budget_exhausted`: it gave no answer."""
        state = self.env.state
        if outcome is None:
            outcome = "error" if error is not None else state.outcome or "budget_exhausted"
        seconds = time.perf_counter() - self.started
        began = self.start.started_at  # the end from it, so the two agree with the duration
        return EpisodeRecord(
            self.start.question_id,
            self.start.sample_index,
            outcome=outcome,
            reward=state.total_reward,
            progress=state.cumulative_progress,
            operational=float(state.operational),
            steps=state.step_count,
            answer=state.answer,
            duration_seconds=seconds,
            error=error if error is not None else state.error,
            failure_class=classify_episode(outcome, self._facts, gold_seen=state.gold_seen),
            tokens_out=self._tokens if self._tokens_known else None,
            mean_logprob=self._logprob_sum / self._scored if self._scored else None,
            ended_at=datetime.now(UTC) if began is None else began + timedelta(seconds=seconds),
        )

    def _count(self, completion: Completion) -> None:
        trace = completion.tokens
        if trace is not None:
            self._tokens_known = True
            self._tokens += len(trace.text)
            if trace.logprobs is not None:
                self._logprob_sum += math.fsum(trace.logprobs)
                self._scored += len(trace.logprobs)
        elif completion.tokens_out is not None:
            self._tokens_known = True
            self._tokens += completion.tokens_out


def observations_match(recorded: str | None, replayed: str | None) -> bool:
    """Equal, or equal up to where a token cap cut one of them (the cut one's kept text begins
    the other: another tokenizer cuts the same text at another place). No answer (None)
    matches only no answer."""
    if recorded == replayed:
        return True
    if recorded is None or replayed is None:
        return False
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
