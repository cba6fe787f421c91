"""verl's rollout dumps: `trainer.rollout_data_dir` (and `validation_data_dir`).

Written by `RayPPOTrainer._dump_generations` (verl/trainer/ppo/ray_trainer.py):
`{dir}/{global_steps}.jsonl`, one JSON object a line with `input` and `output` (the prompt and
the response decoded with special tokens skipped: a multi-turn rollout's tool replies are inside
`output`), `gts` (the ground truth; older verl has none), `score` (the summed token-level
score), `step`, and every reward-extra list as long as the batch. The GRPO uid is not written:
a group is the samples of one prompt in one step's file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.importers.rollouts import Rollout, question_key
from app.importers.source import (
    JsonLines,
    number,
    numeric_columns,
    optional_int,
    step_of,
    text_field,
)
from app.importers.turns import last_user_text, prompt_messages, split_turns
from app.plural import counted
from rollout_core.records import ChatMessage

_NOT_REWARDS = frozenset({"step"})
_PROMPTS_KEPT = 4096


class Verl(JsonLines):
    name = "verl"
    label = "verl rollout dump"
    layout = "<step>.jsonl files (else every .jsonl file of the folder)"

    def files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        numbered, others = _step_files(root)
        if numbered:
            return sorted(numbered, key=lambda p: int(p.stem))
        # Renamed or copied dumps: each line names its step.
        return sorted(others, key=lambda p: (step_of(p.stem), p.name))

    def left_out(self, root: Path) -> str | None:
        if root.is_file():
            return None
        numbered, others = _step_files(root)
        if not numbered or not others:
            return None
        names = sorted(p.name for p in others)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (
            f"read the <step>.jsonl files only, not {counted(len(names), 'other .jsonl file')} "
            f"({shown}); import one by its path, under another --name, to read it"
        )

    def reader(self, path: Path) -> Callable[[dict[str, Any]], Rollout]:
        prompts: dict[str, tuple[list[ChatMessage], str, str]] = {}
        file_step = step_of(path.stem)

        def rollout(data: dict[str, Any]) -> Rollout:
            text = text_field(data, "input")
            output = text_field(data, "output")
            score = number(data["score"], "score")
            seen = prompts.get(text)
            if seen is None:
                if len(prompts) >= _PROMPTS_KEPT:
                    prompts.clear()
                messages = prompt_messages(text)
                question = last_user_text(messages)
                seen = prompts[text] = (messages, question, question_key(question))
            messages, question, qid = seen
            gts = data.get("gts")
            db_id = data.get("db_id")
            return Rollout(
                prompt=messages,
                turns=split_turns(output),
                question=question,
                question_id=qid,
                reward=score,
                # `score` by its name even when the file holds it per token (a list, summed).
                rewards=numeric_columns(data, _NOT_REWARDS) | {"score": score},
                train_step=optional_int(data.get("step", file_step), "step"),
                gold_sql=gts if isinstance(gts, str) else "",
                db_id=db_id if isinstance(db_id, str) else "",
            )

        return rollout


def _step_files(root: Path) -> tuple[list[Path], list[Path]]:
    """The folder's `.jsonl` files named by a step number, and the others."""
    every = list(root.glob("*.jsonl"))
    return [p for p in every if p.stem.isdecimal()], [p for p in every if not p.stem.isdecimal()]
