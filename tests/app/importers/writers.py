"""Rollout files written as each framework's own writer writes them.

verl, SkyRL and rLLM need GPUs and their stacks, and verifiers pins `openai<3` (the project
uses 3.x), so none installs beside rollscope here. Each function below does what its writer
does, line for line where it matters (the file layout, the keys, `json.dumps` and its
arguments, the newlines); the writer's file and function are named on each. TRL's files are
written by TRL itself (tests/app/importers/test_trl_import.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

# A SkyRL-SQL style multi-turn rollout (its agent writes <think>, <sql>, <observation> and
# <solution>), decoded as verl decodes a response: special tokens skipped, so what is left of
# the chat template between turns is the role's name on its own line.
SYSTEM = "You are a data scientist. Think in <think>, run SQL in <sql>, answer in <solution>."


def sql_prompt(question: str, *, special_tokens: bool = False) -> str:
    """A decoded ChatML prompt (Qwen's template) holding the question."""
    if special_tokens:
        return (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
            f"Database: concerts. {question}<|im_end|>\n<|im_start|>assistant\n"
        )
    return f"system\n{SYSTEM}\nuser\nDatabase: concerts. {question}\nassistant\n"


def sql_response(turns: Sequence[tuple[str, str | None]], *, special_tokens: bool = False) -> str:
    """A decoded multi-turn response: each (model text, observation or None)."""
    end, user, assistant = (
        ("<|im_end|>\n", "<|im_start|>user\n", "<|im_start|>assistant\n")
        if special_tokens
        else ("\n", "user\n", "assistant\n")
    )
    parts = []
    for text, observation in turns:
        parts.append(text)
        if observation is not None:
            parts.append(f"{end}{user}<observation>{observation}</observation>{end}{assistant}")
    if special_tokens:
        parts.append("<|im_end|>")
    return "".join(parts)


def verl_dump(
    dump_path: Path,
    global_steps: int,
    inputs: list[str],
    outputs: list[str],
    gts: list[Any],
    scores: list[float],
    reward_extra_infos_dict: Mapping[str, list[Any]],
) -> Path:
    """`RayPPOTrainer._dump_generations` (verl/trainer/ppo/ray_trainer.py)."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {
        "input": inputs,
        "output": outputs,
        "gts": gts,
        "score": scores,
        "step": [global_steps] * n,
    }
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    lines = []
    for i in range(n):
        entry = {k: v[i] for k, v in base_data.items()}
        lines.append(json.dumps(entry, ensure_ascii=False))
    with open(filename, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Path(filename)


def skyrl_dump(
    dump_dir_path: Path,
    input_prompts: list[str],
    output_responses: list[str],
    rewards: list[Any],
    stop_reasons: list[str],
    env_classes: list[str],
    env_extras: list[dict[str, Any]],
    data_sources: list[str],
    eval_metrics: Mapping[str, float],
) -> list[Path]:
    """`dump_per_dataset_eval_results` (skyrl/train/utils/trainer_utils.py; under skyrl_train/
    in earlier releases), its prompts and responses already decoded (`tokenizer.decode`,
    special tokens kept)."""
    dump_dir_path.mkdir(parents=True, exist_ok=True)
    data_source_indices: dict[str, list[int]] = {}
    for i, data_source in enumerate(data_sources):
        data_source_indices.setdefault(data_source or "unknown", []).append(i)
    written = []
    for data_source, indices in data_source_indices.items():
        filename = dump_dir_path / f"{data_source.replace('/', '_')}.jsonl"
        with open(filename, "w") as f:
            for i in indices:
                entry = {
                    "input_prompt": input_prompts[i],
                    "output_response": output_responses[i],
                    "score": rewards[i],
                    "stop_reason": stop_reasons[i],
                    "env_class": env_classes[i],
                    "env_extras": env_extras[i],
                    "data_source": data_source,
                }
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        written.append(filename)
    with open(dump_dir_path / "aggregated_results.jsonl", "w") as f:
        f.write(json.dumps(dict(eval_metrics), ensure_ascii=False) + "\n")
    return written


def rllm_log_episode(
    base_dir: Path, episode: Mapping[str, Any], step: int, mode: str = "train", epoch: int = 0
) -> Path:
    """`EpisodeLogger.log_episode` (rllm/utils/episode_logger.py); `episode` holds the fields
    of rLLM's Episode it reads (`id`, `task`, `is_correct`, `trajectories`, ...), and each of
    an episode, trajectory and step its `info`, whose `timing` the logger copies."""
    task_str = json.dumps(episode["task"], sort_keys=True, default=str)
    task_hash = hashlib.sha256(task_str.encode("utf-8")).hexdigest()[:8]
    episode_data = {
        "training_step": step,
        "epoch": epoch,
        "episode_id": episode["id"],
        "session_id": episode.get("session_id"),
        "task": episode["task"],
        "task_hash": task_hash,
        "is_correct": episode["is_correct"],
        "termination_reason": episode.get("termination_reason"),
        "metrics": episode.get("metrics", {}),
        "metadata": episode.get("metadata", {}),
        "timing": episode.get("info", {}).get("timing", {}),
        "trajectories": [],
    }
    for traj in episode["trajectories"]:
        episode_data["trajectories"].append(  # type: ignore[attr-defined]
            {
                "name": traj.get("name", "agent"),
                "uid": traj.get("uid", "u"),
                "reward": traj["reward"],
                "num_steps": len(traj["steps"]),
                "timing": traj.get("info", {}).get("timing", {}),
                "steps": [
                    {
                        "observation": s.get("observation"),
                        "thought": s.get("thought", ""),
                        "action": s.get("action"),
                        "reward": s.get("reward", 0.0),
                        "done": s.get("done", False),
                        "model_response": s.get("model_response", ""),
                        "chat_completions": s.get("chat_completions", []),
                        "timing": s.get("info", {}).get("timing", {}),
                    }
                    for s in traj["steps"]
                ],
            }
        )
    step_dir = base_dir / "episodes" / f"{mode}_step_{step}_epoch_{epoch}"
    step_dir.mkdir(parents=True, exist_ok=True)
    safe_id = str(episode["id"]).replace(":", "_").replace("/", "_")
    filepath = step_dir / f"episode_hash{task_hash}_id{safe_id}.json"
    with open(filepath, "w") as f:
        json_str = json.dumps(episode_data, indent=2, default=str)
        f.write(json_str + "\n")
        f.flush()
    return filepath


def rllm_timing(start: float, llm: float, env: float, total: float | None = None) -> dict[str, Any]:
    """A timing as `TimingTrackingMixin` (rllm/workflows/timing_mixin.py) puts it in an info:
    a step's from `_step_timings` (`llm_time`, `env_time`), an episode's from `finalize_timing`
    (with `total_time` and `reward_time`)."""
    iso = datetime.fromtimestamp(start, UTC).isoformat()
    timing: dict[str, Any] = {"start_timestamp": iso, "end_timestamp": iso}
    timing |= {"llm_time": llm, "env_time": env}
    if total is not None:
        timing |= {"reward_time": 0.0, "total_time": total}
    return timing


def verifiers_timing(
    start: float, model: Sequence[float], env: Sequence[float], scored: bool = True
) -> dict[str, Any]:
    """`RolloutTiming.model_dump()` (verifiers/types.py) of a rollout that started at Unix time
    `start`, whose model calls and environment responses took these seconds, one after the
    other, and was then scored for 0.05 s (or not scored, as a rollout that failed)."""

    def span(a: float, b: float) -> dict[str, float]:
        return {"start": a, "end": b, "duration": b - a if b > 0 else 0.0}

    clock = start + 0.01  # setup
    model_spans, env_spans = [], []
    for i, took in enumerate(model):
        model_spans.append(span(clock, clock + took))
        clock += took
        if i < len(env):
            env_spans.append(span(clock, clock + env[i]))
            clock += env[i]
    scoring = span(clock, clock + 0.05) if scored else span(0.0, 0.0)
    total = scoring["end"] - start if scored else 0.0
    spent = 0.01 + sum(model) + sum(env) + scoring["duration"]
    return {
        "start_time": start,
        "setup": span(start, start + 0.01),
        "generation": span(start, clock),
        "scoring": scoring,
        "model": {"spans": model_spans, "duration": sum(model)},
        "env": {"spans": env_spans, "duration": sum(env)},
        "total": total,
        "overhead": total - spent,
    }


def verifiers_save(
    results_path: Path, outputs: list[dict[str, Any]], metadata: Mapping[str, Any], mode: str = "w"
) -> Path:
    """`save_outputs` and `save_metadata` (verifiers/utils/save_utils.py, before 0.4); each
    output as `state_to_output` makes it (metrics also flattened to top-level keys)."""
    results_path.mkdir(parents=True, exist_ok=True)
    outputs_path = results_path / "results.jsonl"
    with open(outputs_path, mode) as f:
        for output in outputs:
            row = dict(output)
            for k, v in (output.get("metrics") or {}).items():
                row[k] = v
            json.dump(row, f)
            f.write("\n")
    meta = dict(metadata)
    with open(results_path / "metadata.json", "w") as f:
        json.dump(meta, f)
    return outputs_path


def verifiers_write_episode(results_dir: Path, episode: Mapping[str, Any]) -> Path:
    """`write_episode` (verifiers/v1/utils/trace_store.py, verifiers 0.4): one `Episode` a
    line of `traces.jsonl`, appended, as pydantic's `dump_json(exclude_none=True)` writes it
    (compact, UTF-8 as it is); `episode` holds what that dump holds."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "traces.jsonl"
    data = json.dumps(_without_nones(episode), ensure_ascii=False, separators=(",", ":"))
    with open(path, "ab") as f:
        f.write(data.encode() + b"\n")
    return path


def _without_nones(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nones(v) for v in value]
    return value


def verifiers_node(
    message: Mapping[str, Any],
    parent: int | None,
    *,
    sampled: bool = False,
    at: float = 0.0,
    logprobs: Sequence[float] = (),
) -> dict[str, Any]:
    """A `MessageNode` (verifiers/v1/graph.py) as dumped: an eval's without token data, a
    trainer's with its sampled tokens' `logprobs` (ids and masks left empty here)."""
    return {
        "parent": parent,
        "semantic_parents": [],
        "message": dict(message),
        "sampled": sampled,
        "timestamp": at,
        "token_ids": [],
        "mask": [],
        "is_content": [],
        "logprobs": list(logprobs),
    }


def verifiers_call(
    node: int, start: float, end: float, completion_tokens: int, finish: str = "stop"
) -> dict[str, Any]:
    """A `ModelCall` (verifiers/v1/trace.py) as dumped: the node it committed, its usage."""
    return {
        "node": node,
        "model": "tiny-sql",
        "finish_reason": finish,
        "usage": {"prompt_tokens": 40, "completion_tokens": completion_tokens},
        "time": {"start": start, "end": end},
    }


def verifiers_trace(
    data: Mapping[str, Any],
    nodes: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    *,
    rewards: Mapping[str, Any],
    start: float,
    end: float,
    name: str = "agent",
    trainable: bool = True,
    **fields: Any,
) -> dict[str, Any]:
    """A `Trace` (verifiers/v1/trace.py) as dumped: `rewards` as `{score, weight}` objects, its
    `timing` from `start` to the scoring's `end` (the fields a trace holds are as 0.4.0 writes
    them; `fields` overrides any)."""
    timing = {
        "start": start,
        "boot": {"start": 0.0, "end": 0.0},
        "setup": {"start": start, "end": start + 0.05},
        "agent": {"start": start + 0.05, "end": end - 0.1, "model": {"duration": 0.0},
                  "harness": {"duration": 0.0}},
        "finalize": {"start": end - 0.1, "end": end - 0.09},
        "scoring": {"start": end - 0.09, "end": end},
    }  # fmt: skip
    return {
        "version": 1,
        "id": f"trace-{name}",
        "verifiers": {"version": "0.4.0"},
        "task": {"type": "SqlTask", "data": dict(data)},
        "agent": {"config": {"timeout": {}}, "name": name, "trainable": trainable},
        "tools": [],
        "nodes": nodes,
        "calls": calls,
        "mm_token_type_id_map": {},
        "request_rewrites": [],
        "response_rewrites": [],
        "rewards": dict(rewards),
        "metrics": {},
        "info": {},
        "extra_usage": [],
        "is_completed": True,
        "ok": True,
        "stop_condition": "no_tools",
        "is_timeout": False,
        "errors": [],
        "timing": timing,
    } | fields


def prime_rl_log_episodes(
    output_dir: Path, episodes: Sequence[Mapping[str, Any]], step: int, kind: str, subset: str
) -> Path:
    """`FileMonitor.log_episodes` (prime-rl's src/prime_rl/monitors/file.py): each episode's
    `to_record()` (a v1 `Episode` dumped as `write_episode` dumps it) appended by orjson to
    the step's file for its kind (`train`, `eval`) and subset (`all`, `effective`)."""
    path = output_dir / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
    with open(path, "ab") as f:
        for episode in episodes:
            f.write(orjson.dumps(_without_nones(episode), default=str, option=opts))
    return path
