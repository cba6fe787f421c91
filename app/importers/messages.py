"""Chat logs: JSONL, one episode a line, in the OpenAI chat format.

Each line: `messages` (the conversation: the prompt, then the model's turns with the tool or
user replies after each) and `reward`; optionally `question_id`, `question`, `step`, `group`,
`model`, `correct`, `db_id`, `gold_sql`, `rewards` (an object of named rewards) and
`finish_reason` (the last completion's, as the OpenAI API names it: "length" where it was cut).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.importers.rollouts import Rollout, question_key
from app.importers.source import BadRow, JsonLines, number, optional_int
from app.importers.turns import last_user_text, message_turns


class Messages(JsonLines):
    name = "messages"
    label = "chat log"
    layout = "the folder's .jsonl files"

    def files(self, root: Path) -> list[Path]:
        return [root] if root.is_file() else sorted(root.glob("*.jsonl"))

    def reader(self, path: Path) -> Callable[[dict[str, Any]], Rollout]:
        return rollout

    def checkpoint(self, root: Path) -> str | None:
        """The first line's `model`."""
        return self.first_model(root)


def rollout(data: dict[str, Any]) -> Rollout:
    messages = data["messages"]
    if not isinstance(messages, list) or not messages:
        raise BadRow("'messages' is not a list of chat messages")
    prompt, turns = message_turns(messages)
    if not turns:
        raise BadRow("'messages' holds no assistant message")
    reward = number(data["reward"], "reward")
    named = data.get("rewards")
    rewards = {"reward": reward}
    if isinstance(named, Mapping):
        rewards |= {str(k): number(v, f"rewards.{k}") for k, v in named.items()}
    question = data.get("question")
    question = question if isinstance(question, str) else last_user_text(prompt)
    qid = data.get("question_id")
    correct = data.get("correct")
    group = data.get("group")
    finish = data.get("finish_reason")
    return Rollout(
        prompt=prompt,
        turns=turns,
        question=question,
        question_id=str(qid) if qid is not None else question_key(question),
        reward=reward,
        rewards=rewards,
        correct=correct if isinstance(correct, bool) else None,
        train_step=optional_int(data.get("step"), "step"),
        group=group if isinstance(group, str | int) else None,
        model=str(data["model"]) if data.get("model") is not None else None,
        db_id=str(data.get("db_id") or ""),
        gold_sql=str(data.get("gold_sql") or ""),
        truncated=finish == "length" if isinstance(finish, str) else None,
    )
