"""rLLM's episode logs.

Written by `EpisodeLogger.log_episode` (rllm/utils/episode_logger.py): one pretty-printed JSON
file per episode, `{base_dir}/episodes/{mode}_step_{N}_epoch_{E}/episode_hash{h}_id{id}.json`,
holding `training_step`, `task`, `task_hash`, `episode_id`, `is_correct`, `termination_reason`,
`metrics`, and `trajectories`, each with its `reward` and `steps` (`observation`, `thought`,
`action`, `model_response`, `reward`, `done`, `chat_completions`: the conversation so far),
and the `timing` a workflow's `TimingTrackingMixin` (rllm/workflows/timing_mixin.py) keeps.
A group is one task's episodes at a step. A folder of training and validation episodes is read
for its training ones (`train_step_*`); import a `val_step_*` folder as a run of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.importers.rollouts import Rollout, question_key
from app.importers.source import (
    BadRow,
    FileDigest,
    Format,
    Row,
    json_object,
    measured,
    number,
    numeric_columns,
    optional_int,
    problem_text,
)
from app.importers.turns import Turn, content_text, last_user_text, message_turns
from app.plural import counted

_STEP_DIR = re.compile(r"(\w+?)_step_(\d+)_epoch_(\d+)\Z")
_QUESTION_KEYS = ("question", "problem", "instruction", "prompt", "query_text")
_GOLD_KEYS = ("gold_sql", "query", "sql", "ground_truth")


class RLLM(Format):
    name = "rllm"
    label = "rLLM episode log"
    layout = "episodes/<mode>_step_<N>_epoch_<E>/episode_*.json"
    file_an_episode = True

    def files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        if _STEP_DIR.match(root.name):
            dirs = [root]
        else:
            train, others = _step_dirs(root)
            dirs = train or others
        dirs.sort(key=_dir_order)
        return [f for d in dirs for f in sorted(d.glob("episode_*.json"))]

    def left_out(self, root: Path) -> str | None:
        if root.is_file() or _STEP_DIR.match(root.name):
            return None
        train, others = _step_dirs(root)
        if not train or not others:
            return None
        modes = sorted({d.name.split("_step_", 1)[0] for d in others})
        return (
            f"read the train_step_* folders only, not {counted(len(others), 'folder')} of "
            f"{' and '.join(modes)} episodes; import one by its path, under another --name, to "
            "read it"
        )

    def row_count(self, path: Path, digest: FileDigest) -> int:
        return 1

    def whole(self, path: Path) -> bool:
        try:
            json.loads(path.read_bytes())
        except RecursionError:
            return True  # complete, and too deep to keep: its row says so
        except (OSError, ValueError):
            return False
        return True

    def rows(self, path: Path) -> Iterator[Row]:
        raw = path.read_bytes()
        digest = hashlib.sha256(raw).digest()
        try:
            yield Row(1, digest, rollout(json_object(raw)))
        except (BadRow, KeyError, TypeError, ValueError) as exc:
            yield Row(1, digest, None, problem_text(exc))


def _step_dirs(root: Path) -> tuple[list[Path], list[Path]]:
    """The `<mode>_step_<N>_epoch_<E>` folders under the root (or its `episodes/`): the
    training ones, and the others (validation)."""
    base = root / "episodes" if (root / "episodes").is_dir() else root
    dirs = [d for d in base.iterdir() if d.is_dir() and _STEP_DIR.match(d.name)]
    train = [d for d in dirs if d.name.startswith("train_")]
    return train, [d for d in dirs if not d.name.startswith("train_")]


def _dir_order(d: Path) -> tuple[int, int, str]:
    found = _STEP_DIR.match(d.name)
    assert found is not None
    return int(found.group(2)), int(found.group(3)), found.group(1)


def rollout(data: dict[str, Any]) -> Rollout:
    trajectories = data["trajectories"]
    ended = str(data.get("termination_reason") or "").lower()  # a TerminationReason's value
    # An episode that failed before its model's first turn keeps no step: an error episode
    # of no steps, as rollscope's own that could not begin.
    error = f"rLLM ended the episode: {ended}" if ended in ("error", "timeout") else None
    if not isinstance(trajectories, list) or not (trajectories or error):
        raise BadRow("'trajectories' is not a list of trajectories")
    steps = [s for t in trajectories if isinstance(t, Mapping) for s in t.get("steps") or ()]
    if not (steps or error) or not all(isinstance(s, Mapping) for s in steps):
        raise BadRow("its trajectories hold no steps")
    prompt, turns = _turns(steps) if steps else ([], [])
    task = data.get("task")
    task = task if isinstance(task, Mapping) else {"question": task} if task else {}
    question = next((str(task[k]) for k in _QUESTION_KEYS if isinstance(task.get(k), str)), "")
    question = question or last_user_text(prompt)
    qid = task.get("id", task.get("question_id"))
    reward = sum(number(t.get("reward") or 0.0, "a trajectory's reward") for t in trajectories)
    metrics = data.get("metrics")
    rewards = {"reward": reward}
    if isinstance(metrics, Mapping):
        rewards |= numeric_columns(metrics, frozenset())
    correct = data.get("is_correct")
    step_rewards = [number(s.get("reward") or 0.0, "a step's reward") for s in steps]
    step_times = [
        (_seconds(s.get("timing"), "llm_time"), _seconds(s.get("timing"), "env_time"))
        for s in steps
    ]
    return Rollout(
        prompt=prompt,
        turns=turns,
        question=question,
        question_id=str(qid) if qid is not None else question_key(question),
        reward=reward,
        rewards=rewards,
        correct=correct if isinstance(correct, bool) else None,
        train_step=optional_int(data.get("training_step"), "training_step"),
        group=str(data.get("task_hash") or "") or None,
        db_id=str(task.get("db_id") or ""),
        gold_sql=next((str(task[k]) for k in _GOLD_KEYS if isinstance(task.get(k), str)), ""),
        step_rewards=step_rewards if len(step_rewards) == len(turns) else None,
        truncated=ended == "max_response_length_exceeded" if ended else None,
        error=error,
        seconds=_seconds(data.get("timing"), "total_time"),
        turn_seconds=step_times if len(step_times) == len(turns) else None,
    )


def _seconds(timing: Any, key: str) -> float | None:
    """A `timing`'s seconds under `key`. One without a start timestamp was never taken: the
    mixin writes zeros for a step it did not time, and a workflow without it writes {}."""
    if not isinstance(timing, Mapping) or timing.get("start_timestamp") is None:
        return None
    return measured(timing.get(key))


def _turns(steps: Sequence[Mapping[str, Any]]) -> tuple[list[Any], list[Turn]]:
    """The conversation of the last step (its `chat_completions`, with its response), as
    prompt and turns; from each step's response and the next step's observation when the
    steps carry no conversation."""
    last = steps[-1]
    chat = last.get("chat_completions")
    response = content_text(last.get("model_response"))
    if isinstance(chat, list) and chat and all(isinstance(m, Mapping) for m in chat):
        messages = list(chat)
        tail = messages[-1]
        if response and not (
            tail.get("role") == "assistant" and content_text(tail.get("content")) == response
        ):
            messages.append({"role": "assistant", "content": response})
        prompt, turns = message_turns(messages)
        if turns:
            return prompt, turns
    first = steps[0].get("observation")
    prompt = [{"role": "user", "content": _text(first)}] if first is not None else []
    turns = []
    for i, step in enumerate(steps):
        output = content_text(step.get("model_response"))
        reply = steps[i + 1].get("observation") if i + 1 < len(steps) else None
        said: tuple[Any, ...] = ({"role": "assistant", "content": output},)
        if reply is not None:
            said += ({"role": "user", "content": _text(reply)},)
        turns.append(Turn(output, None if reply is None else _text(reply), said))
    return prompt, turns


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
