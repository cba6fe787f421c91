"""SkyRL's evaluation dumps.

Written by `dump_per_dataset_eval_results` (skyrl/train/utils/trainer_utils.py; under
skyrl_train/ in earlier releases) at each evaluation:
`{export_path}/dumped_evals/global_step_{N}_evals/{data_source}.jsonl`, one JSON object a line
with `input_prompt` and `output_response` (decoded with the chat template's special tokens
kept: a multi-turn rollout's observations are inside the response), `score` (a number, or
token-level rewards to sum), `stop_reason`, `env_class`, `env_extras` (SkyRL-SQL's: `db_id`,
and the gold SQL as `reward_spec.ground_truth`) and `data_source`; beside them
`aggregated_results.jsonl`, the metrics, which is not a rollout file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.importers.rollouts import Rollout, question_key
from app.importers.source import JsonLines, number, optional_int, step_of, text_field
from app.importers.turns import last_user_text, prompt_messages, split_turns

_STEP_DIR = re.compile(r"global_step_(\d+)_evals\Z")
_NOT_ROLLOUTS = frozenset({"aggregated_results.jsonl"})


class SkyRL(JsonLines):
    name = "skyrl"
    label = "SkyRL evaluation dump"
    layout = "dumped_evals/global_step_<N>_evals/<data_source>.jsonl"

    def files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        if _STEP_DIR.match(root.name):
            dirs = [root]
        else:
            base = root / "dumped_evals" if (root / "dumped_evals").is_dir() else root
            dirs = [d for d in base.iterdir() if d.is_dir() and _STEP_DIR.match(d.name)]
        dirs.sort(key=lambda d: step_of(d.name))
        return [f for d in dirs for f in sorted(d.glob("*.jsonl")) if f.name not in _NOT_ROLLOUTS]

    def reader(self, path: Path) -> Callable[[dict[str, Any]], Rollout]:
        found = _STEP_DIR.match(path.parent.name)
        step = int(found.group(1)) if found else None

        def rollout(data: dict[str, Any]) -> Rollout:
            text = text_field(data, "input_prompt")
            messages = prompt_messages(text)
            question = last_user_text(messages)
            extras = data.get("env_extras")
            extras = extras if isinstance(extras, Mapping) else {}
            score = number(data["score"], "score")
            return Rollout(
                prompt=messages,
                turns=split_turns(text_field(data, "output_response")),
                question=question,
                question_id=question_key(question),
                reward=score,
                rewards={"score": score},
                train_step=optional_int(step, "the step in the folder's name"),
                db_id=str(extras.get("db_id") or ""),
                gold_sql=_gold(extras),
                truncated=_cut(data.get("stop_reason")),
            )

        return rollout


def _gold(extras: Mapping[str, Any]) -> str:
    spec = extras.get("reward_spec")
    for source in (spec if isinstance(spec, Mapping) else {}, extras):
        for key in ("ground_truth", "gold_sql", "sql"):
            if isinstance(source.get(key), str):
                return str(source[key])
    return ""


def _cut(stop_reason: object) -> bool | None:
    """Whether vLLM's max_tokens cut the last turn (its stop reason "length"); None where the
    line gives no stop reason."""
    return stop_reason == "length" if isinstance(stop_reason, str) else None
