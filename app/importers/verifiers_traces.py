"""verifiers' v1 traces (verifiers 0.4 and later): `traces.jsonl`, one rollout episode a line.

Written by `write_episode` (verifiers/v1/utils/trace_store.py) as an `Episode` dumps to JSON
(verifiers/v1/episode.py): its `task`, `group`, `run` (a training run's `work.step`) and
`traces`, each agent's `Trace` (verifiers/v1/trace.py) holding the conversation as a message
graph (`nodes`, each with its `parent` and whether a model call `sampled` it), one `calls` entry
per model call (its node, model, usage, `finish_reason` and time span), `rewards` (a score and
a weight each), `metrics`, `errors`, `stop_condition` and `timing`.

An episode of several agents' traces (a solver and its judge) gives a rollout for each trainable
agent's trace, the ones a trainer learns from (the judge's is left); the conversation is the
trace graph's last branch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.importers.rollouts import Rollout
from app.importers.source import (
    BadRow,
    exact_sum,
    json_kind,
    measured,
    number,
    numeric_columns,
    optional_int,
    stored_count,
)
from app.importers.turns import last_user_text, message_turns

_GOLD_KEYS = ("gold_sql", "query", "sql")
_TRUNCATING_STOPS = ("max_output_tokens", "max_total_tokens", "max_input_tokens", "context_length")
"""Stop conditions that cut the last turn at a token limit (`Trace.is_truncated` also counts
`max_turns`, which cuts no turn: the rollout ran out of turns)."""


def trace_rollouts(episode: Mapping[str, Any]) -> tuple[Rollout, ...]:
    """The rollouts of an `Episode` line: one a trainable agent's trace (one when no agent is
    trainable: the first's), in the episode's order."""
    traces = episode.get("traces")
    if traces == []:
        # An episode that failed before any agent ran is written too (prime-rl keeps them).
        failed = _last_error(episode.get("errors"))
        if failed is None:
            raise BadRow("the episode holds no trace, and no error saying why")
        return (_failed(episode, _field(_field(episode, "task"), "data"), failed, {}),)
    return tuple(
        replace(_trace_rollout(episode, trace), agent=_agent_name(trace))
        for trace in _trainable_traces(traces)
    )


def _agent_name(trace: Mapping[str, Any]) -> str | None:
    name = _field(trace, "agent").get("name")
    return name if isinstance(name, str) and name else None


def _trace_rollout(episode: Mapping[str, Any], trace: Mapping[str, Any]) -> Rollout:
    """The rollout of one agent's trace of the episode."""
    nodes = trace.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, Mapping) for n in nodes):
        raise BadRow(f"the trace's 'nodes' is {json_kind(nodes)}, not a list of messages")
    path = _last_branch(nodes) if nodes else []
    messages = [_message(nodes[n]) for n in path]
    first = next((i for i, n in enumerate(path) if nodes[n].get("sampled") is True), None)
    data = _field(_field(trace, "task") or _field(episode, "task"), "data")
    error = _last_error(trace.get("errors")) or _last_error(episode.get("errors"))
    if first is None:
        if error is None:
            raise BadRow("the trace holds no message a model call sampled")
        # Its first model call failed (the inference server was down, the prompt too long).
        return _failed(episode, data, error, _rewards(trace), messages)
    prompt = messages[:first]
    _, turns = message_turns(messages[first:])
    calls = [c for c in trace.get("calls") or () if isinstance(c, Mapping)]
    answered = [n for n, m in zip(path, messages, strict=True) if m["role"] == "assistant"]
    answered = answered[-len(turns) :] if turns else []
    rewards = _rewards(trace)
    sampled = _logprobs(nodes[n].get("logprobs") for n in answered)
    tokens_out = _tokens_out(calls)
    if tokens_out is None and sampled is not None:
        tokens_out = sampled[1]  # no usage reported: a trainer's trace still counts its tokens
    return replace(
        _task_rollout(episode, data, prompt),
        turns=turns,
        reward=rewards["reward"],
        rewards=rewards,
        model=next((str(c["model"]) for c in calls if isinstance(c.get("model"), str)), None),
        truncated=_truncated(trace, calls),
        error=error,
        seconds=_seconds(trace.get("timing")),
        turn_seconds=_turn_seconds(calls, answered),
        tokens_out=tokens_out,
        mean_logprob=None if sampled is None else sampled[0],
    )


def _task_rollout(
    episode: Mapping[str, Any], data: Mapping[str, Any], prompt: list[dict[str, Any]]
) -> Rollout:
    """A rollout of no turns yet, with what the task and the run say: the question, its id,
    database and gold SQL, the training step and the group."""
    answer = data.get("answer")
    gold = next((str(data[k]) for k in _GOLD_KEYS if isinstance(data.get(k), str)), "")
    qid = data.get("id", data.get("idx"))
    work = _field(_field(episode, "run"), "work")
    group = _field(episode, "group").get("id")
    return Rollout(
        prompt=prompt,
        turns=[],
        question=last_user_text(prompt) or _task_prompt(data),
        question_id=None if qid is None else str(qid),
        reward=0.0,
        db_id=str(data.get("db_id") or ""),
        gold_sql=gold or (answer if isinstance(answer, str) and is_sql(answer) else ""),
        train_step=optional_int(work.get("step"), "the run's work step"),
        group=None if group is None else str(group),
    )


def _failed(
    episode: Mapping[str, Any],
    data: Mapping[str, Any],
    error: str,
    rewards: Mapping[str, float],
    prompt: list[dict[str, Any]] | None = None,
) -> Rollout:
    """An episode that failed before its model's first turn: an error episode of no steps,
    as rollscope's own that could not begin; its reward is what its trace's rewards sum to,
    0 when nothing scored it (named rewards only where some were given)."""
    named = {k: v for k, v in rewards.items() if k != "reward"}
    return replace(
        _task_rollout(episode, data, prompt or []),
        reward=rewards.get("reward", 0.0),
        rewards=dict(rewards) if named else {},
        error=error,
    )


def is_sql(text: str) -> bool:
    """Whether an answer is a SQL query (a reference answer, graded by the rows it returns)."""
    head = text.lstrip()[:6].upper()
    return head == "SELECT" or head.startswith("WITH")


def _field(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """An object-valued field, or an empty one."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _trainable_traces(traces: Any) -> list[Mapping[str, Any]]:
    if not isinstance(traces, list):
        raise BadRow(f"'traces' is {json_kind(traces)}, not a list of traces")
    found = [t for t in traces if isinstance(t, Mapping)]
    if not found:
        raise BadRow("'traces' holds no trace object")
    trained = [t for t in found if _field(t, "agent").get("trainable", True) is not False]
    return trained or found[:1]


def _last_branch(nodes: Sequence[Mapping[str, Any]]) -> list[int]:
    """The node ids from the root to the last leaf (`Trace.messages`' branch), in order."""
    parents = [n.get("parent") for n in nodes]
    has_child = {p for p in parents if p is not None}
    leaves = [i for i in range(len(nodes)) if i not in has_child]
    if not leaves:
        raise BadRow("the trace's nodes form no path from a first message to a last")
    path: list[int] = []
    at: Any = leaves[-1]
    while at is not None:
        if not isinstance(at, int) or not 0 <= at < len(nodes) or at in path:
            raise BadRow(f"a node's parent is {at!r}, not an earlier node")
        path.append(at)
        at = parents[at]
    return path[::-1]


def _message(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node's message as chat messages are stored: its tool calls in OpenAI's shape."""
    message = node.get("message")
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise BadRow(f"a node's message is {json_kind(message)}, not a message with a role")
    out = dict(message)
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_openai_call(c) for c in calls]
    return out


def _openai_call(call: Any) -> Any:
    """A v1 `ToolCall` (`id`, `name`, `arguments`) as OpenAI writes one."""
    if not isinstance(call, Mapping) or "function" in call:
        return call
    function = {"name": call.get("name"), "arguments": call.get("arguments")}
    return {"id": call.get("id"), "type": "function", "function": function}


def _rewards(trace: Mapping[str, Any]) -> dict[str, float]:
    """Each metric and reward by name (a reward as its score times its weight), and `reward`,
    the rewards' sum as `Trace.reward` takes it. A reward scoring did not run is null."""
    named: dict[str, float] = {}
    metrics = trace.get("metrics")
    if isinstance(metrics, Mapping):
        named |= numeric_columns(metrics, frozenset())
    rewards = trace.get("rewards")
    if rewards is not None and not isinstance(rewards, Mapping):
        raise BadRow(f"'rewards' is {json_kind(rewards)}, not an object of named rewards")
    total = 0.0
    for name, reward in (rewards or {}).items():
        if reward is None:
            continue
        if not isinstance(reward, Mapping):
            raise BadRow(f"reward {name!r} is {json_kind(reward)}, not a score and a weight")
        score = number(reward.get("score"), f"the score of reward {name!r}")
        value = score * number(reward.get("weight", 1.0), f"the weight of reward {name!r}")
        named[str(name)] = value
        total += value
    return named | {"reward": total}


def _task_prompt(data: Mapping[str, Any]) -> str:
    """The question `TaskData.prompt` holds: its text, or its messages' last user message."""
    prompt = data.get("prompt")
    if isinstance(prompt, list):
        return last_user_text([m for m in prompt if isinstance(m, Mapping)])
    return prompt if isinstance(prompt, str) else ""


def _truncated(trace: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether the last turn was cut at a token limit; None where the trace says neither how
    it stopped nor how its last call finished."""
    stop = trace.get("stop_condition")
    if stop in _TRUNCATING_STOPS:
        return True
    last = next((c for c in reversed(calls) if c.get("error") is None), None)
    finish = last.get("finish_reason") if last is not None else None
    if isinstance(finish, str):
        return finish == "length"
    return False if isinstance(stop, str) else None


def _tokens_out(calls: Sequence[Mapping[str, Any]]) -> int | None:
    """Tokens the model wrote: its calls' `completion_tokens`, when every call reports usage."""
    total = 0.0
    for call in calls:
        usage = call.get("usage")
        count = measured(usage.get("completion_tokens")) if isinstance(usage, Mapping) else None
        if count is None:
            return None
        total += count
    return stored_count(total) if calls else None


def _logprobs(per_turn: Iterable[Any]) -> tuple[float, int] | None:
    """The mean log-probability of the sampled tokens (a node's `logprobs`, when the trainer's
    renderer recorded them) and how many they are; None unless every turn has its tokens'."""
    values: list[float] = []
    for logprobs in per_turn:
        if not isinstance(logprobs, list) or not logprobs:
            return None
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in logprobs):
            return None
        values.extend(float(v) for v in logprobs)
    mean = exact_sum(values) / len(values) if values else math.nan
    return (mean, len(values)) if math.isfinite(mean) else None  # no mean of values past a float


def error_text(error: Any) -> str | None:
    """An error as a file gives it: a v1 `Error`'s `{type, message}` as `type: message`, the
    exception's repr as `save_outputs` wrote it before 0.4; None for none."""
    if error is None or error == "":
        return None
    if isinstance(error, Mapping):
        kind, message = error.get("type"), error.get("message")
        return f"{kind}: {message}" if kind and message else json.dumps(error, default=str)
    return str(error)


def _last_error(errors: Any) -> str | None:
    """The last error captured (`Trace.errors`, `Episode.errors`: oldest first)."""
    return error_text(errors[-1]) if isinstance(errors, list) and errors else None


def _seconds(timing: Any) -> float | None:
    """From the trace's start to the last of its stages' ends (`Timing`: setup, agent,
    finalize, scoring, each a span of Unix times)."""
    if not isinstance(timing, Mapping):
        return None
    start = measured(timing.get("start"))
    ends = [measured(s.get("end")) for s in timing.values() if isinstance(s, Mapping)]
    end = max((e for e in ends if e), default=None)
    if not start or end is None or end < start:
        return None
    return end - start


def _turn_seconds(
    calls: Sequence[Mapping[str, Any]], answered: Sequence[int]
) -> list[tuple[float | None, float | None]]:
    """Each turn's (model, environment) seconds. The model's: the span of the call that
    committed the turn's node. The environment's: from that call's end to the next turn's
    call's start, the tools and the harness answering the turn; unknown after the last."""
    spans = {c.get("node"): c.get("time") for c in calls}
    out: list[tuple[float | None, float | None]] = []
    for i, node in enumerate(answered):
        span, env = spans.get(node), None
        model = span_seconds(span)
        following = spans.get(answered[i + 1]) if i + 1 < len(answered) else None
        if model is not None and isinstance(span, Mapping) and isinstance(following, Mapping):
            ended, next_start = measured(span.get("end")), measured(following.get("start"))
            if ended is not None and next_start is not None and next_start >= ended:
                env = next_start - ended
        out.append((model, env))
    return out


def span_seconds(span: Any) -> float | None:
    """A `TimeSpan`'s seconds (its `start` and `end` are Unix times); None when it never
    ended."""
    if not isinstance(span, Mapping):
        return None
    start, end = measured(span.get("start")), measured(span.get("end"))
    if start is None or not end or end < start:
        return None
    return end - start
