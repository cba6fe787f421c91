"""verifiers' evaluation results (`vf-eval -s`, `prime eval`, before verifiers 0.4).

Written by `save_outputs` (verifiers/utils/save_utils.py; appending as rollouts finish):
`outputs/evals/{env}--{model}/{run_id}/results.jsonl`, one rollout a line as `state_to_output`
makes it: `example_id`, `prompt` and `completion` (chat messages, or text), `answer`, `reward`,
`metrics` (each reward function's value, also flattened to top-level keys), `info` (a
text-to-SQL environment's `db_id` in it), `is_truncated`, `stop_condition`, `error`, `timing`,
`token_usage`; beside it `metadata.json` (`env_id`, `model`, ...). Evaluations have no training
step: a group is one example's rollouts.
verifiers 0.4 (its v1 API) writes `traces.jsonl` instead, a line an episode of traces, which
`app.importers.verifiers_traces` reads; so does prime-rl, training on verifiers environments,
a file per training step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.importers.rollouts import Rollout
from app.importers.source import (
    BadRow,
    JsonLines,
    Rollouts,
    json_kind,
    measured,
    number,
    numeric_columns,
    optional_int,
    stored_count,
)
from app.importers.turns import Turn, last_user_text, message_turns
from app.importers.verifiers_traces import error_text, is_sql, span_seconds, trace_rollouts
from rollout_core.errors import RollscopeError

RESULTS = ("results.jsonl", "traces.jsonl")
# prime-rl's `FileMonitor.log_episodes` (src/prime_rl/monitors/file.py) appends each training
# step's episodes to `{output_dir}/rollouts/step_{N}/{train|eval}/{all|effective}/traces.jsonl`:
# `all` every episode as it completes, `effective` again those the trainer kept.
_PRIME_RL = re.compile(r"(?:\A|/)step_(\d+)/(train|eval)/(all|effective)/traces\.jsonl\Z")


class Verifiers(JsonLines):
    name = "verifiers"
    label = "verifiers output"
    layout = "results.jsonl (or traces.jsonl) anywhere under the folder"

    def files(self, root: Path) -> list[Path]:
        """Every `results.jsonl` under the root, and every `traces.jsonl` of a folder without
        one; of prime-rl's rollouts, each step's `train/all` file (every training episode
        once), in step order, unless the root holds only evaluations."""
        if root.is_file():
            return [root]
        results = sorted(root.rglob(RESULTS[0]))
        if results:
            _one_model(root, results)
        # Folder by folder: a run of 0.4 beside an earlier version's evaluation is read too.
        with_results = {p.parent for p in results}
        traces = [p for p in sorted(root.rglob(RESULTS[1])) if p.parent not in with_results]
        return results + _prime_rl_chosen(traces)

    def reader(self, path: Path) -> Callable[[dict[str, Any]], Rollouts]:
        found = _PRIME_RL.search(path.as_posix())
        if found is None:
            return rollouts
        # The step the trainer logged the episode under, as its own metrics are: an episode's
        # `run.work.step` is the step it was sent out at, earlier when training runs ahead.
        step = int(found.group(1))
        return lambda data: tuple(
            replace(r, train_step=optional_int(step, "the step in the folder's name"))
            for r in rollouts(data)
        )

    def checkpoint(self, root: Path) -> str | None:
        """The model the run's folder names: `metadata.json`'s, or v1's resolved config
        (`configs/resolved/eval.json`, `configs/eval.json` in later versions); else the model
        the first rollout's calls name."""
        files = self.files(root)
        folder = files[0].parent if files else root
        configs = [
            *(folder / "configs" / "resolved").glob("*.json"),
            *(folder / "configs").glob("*.json"),
        ]
        for meta in (folder / "metadata.json", *sorted(configs)):
            try:
                found = json.loads(meta.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                continue
            if (
                isinstance(found, Mapping)
                and isinstance(found.get("model"), str)
                and found["model"]
            ):
                return str(found["model"])
        return self.first_model(root)


def _prime_rl_chosen(traces: list[Path]) -> list[Path]:
    """Of prime-rl's rollouts, each step's `train/all` file (every training episode once), in
    step order, unless the folder holds only evaluations; other traces as they are."""
    stepped = [(m, p) for p in traces if (m := _PRIME_RL.search(p.as_posix()))]
    if not stepped:
        return traces
    everything = [(m, p) for m, p in stepped if m.group(3) == "all"] or stepped
    chosen = [(m, p) for m, p in everything if m.group(2) == "train"] or everything
    return [p for m, p in sorted(chosen, key=lambda mp: (int(mp[0].group(1)), mp[1]))]


class SeveralModels(RollscopeError, ValueError):
    """A folder of verifiers results holds several models' evaluations."""


def _one_model(root: Path, results: list[Path]) -> None:
    """SeveralModels when the folders' `metadata.json` name several models: `vf-eval -s` writes
    `outputs/evals/{env}--{model}/{run}/`, and their results under one run would pass one
    model's accuracy off as a blend of all."""
    models = {m for path in results if (m := _metadata_model(path.parent)) is not None}
    if len(models) > 1:
        raise SeveralModels(
            f"{root} holds the evaluations of {len(models)} models ({', '.join(sorted(models))}); "
            "a run is one model's: import each model's folder ({env}--{model}) under its own "
            "--name"
        )


def _metadata_model(folder: Path) -> str | None:
    """The model a results folder's `metadata.json` names, if it names one."""
    try:
        found = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    model = found.get("model") if isinstance(found, Mapping) else None
    return model if isinstance(model, str) and model else None


def rollouts(data: dict[str, Any]) -> tuple[Rollout, ...]:
    """A line's rollouts: a `results.jsonl` line's one; a v1 `traces.jsonl` line's, one a
    trained agent."""
    return trace_rollouts(data) if "traces" in data else (_result_rollout(data),)


def _result_rollout(data: dict[str, Any]) -> Rollout:
    prompt = _messages(data["prompt"], "user")
    completion = _messages(data["completion"], "assistant")
    _, turns = message_turns(completion)
    error = error_text(data.get("error"))
    # A rollout that failed before the model's first turn (its sandbox never started, its
    # first model call failed) is an error episode of no steps, as a v1 trace's is.
    if not turns and error is None:
        raise BadRow("'completion' holds no assistant message")
    reward = number(data["reward"], "reward")
    metrics = data.get("metrics")
    rewards = {"reward": reward}
    if isinstance(metrics, Mapping):
        rewards |= numeric_columns(metrics, frozenset())
    answer = data.get("answer")
    example = data["example_id"]
    seconds, turn_seconds = _timing(data.get("timing"), len(turns))
    usage = data.get("token_usage")
    tokens = measured(usage.get("output_tokens")) if isinstance(usage, Mapping) else None
    # A text-to-SQL environment's dataset row keeps its database in `info` (Spider's, BIRD's).
    info = data.get("info")
    db_id = info.get("db_id") if isinstance(info, Mapping) else None
    cut = data.get("is_truncated")
    return Rollout(
        prompt=prompt,
        turns=turns,
        question=last_user_text(prompt),
        question_id=str(example),
        reward=reward,
        rewards=rewards,
        gold_sql=answer if isinstance(answer, str) and is_sql(answer) else "",
        db_id=db_id if isinstance(db_id, str) else "",
        truncated=cut if isinstance(cut, bool) else None,
        error=error,
        seconds=seconds,
        turn_seconds=turn_seconds,
        tokens_out=stored_count(tokens),
    )


Timed = tuple[float | None, float | None]
"""A turn's (model, environment) seconds."""


def _timing(timing: Any, turns: int) -> tuple[float | None, list[Timed] | None]:
    """The rollout's seconds, and each turn's (model, environment) seconds, from the `timing`
    `state_to_output` writes: a `RolloutTiming` (verifiers/types.py), whose `total` runs from
    the generation's start to the scoring's end (0 when it was not scored), with a span per
    model call and per environment response after the first turn; or an older version's
    `total_ms` and `generation_ms`. None for what it does not time."""
    if not isinstance(timing, Mapping):
        return None, None
    total = measured(timing.get("total")) or span_seconds(timing.get("generation"))
    if not total:
        ms = measured(timing.get("total_ms", timing.get("generation_ms")))
        total = ms / 1000 if ms else None
    model, env = _spans(timing.get("model")), _spans(timing.get("env"))
    if len(model) != turns:
        return total or None, None
    # The environment answers every turn but the last, and the last too when it had a final
    # response; any other count cannot be lined up with the turns.
    replies = env if len(env) in (turns - 1, turns) else []
    replies = [*replies, *[None] * (turns - len(replies))]
    return total or None, list(zip(model, replies, strict=True))


def _spans(value: Any) -> list[float | None]:
    """A `TimeSpans`' durations, in order."""
    spans = value.get("spans") if isinstance(value, Mapping) else None
    return [span_seconds(s) for s in spans] if isinstance(spans, list) else []


def _messages(value: Any, role: str) -> list[dict[str, Any]]:
    """Chat messages, or a text as one message of `role`."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value):
        return [dict(m) for m in value]
    raise BadRow(f"the {role} side is {json_kind(value)}, not chat messages or text")


__all__ = ["Turn", "Verifiers"]
