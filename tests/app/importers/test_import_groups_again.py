"""A GRPO group that carries its framework's own id (rLLM's `task_hash`, a chat log's
`group`, a Recorder's `group=`) stays one group when its rollouts come in two goes (a folder
that gained files, a log appended to, an import or a Recorder started again): the same groups
as one import of them all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.test_other_formats import COUNT_Q, FRANCE_Q, _rllm_episode
from tests.app.importers.writers import rllm_log_episode

# Each GRPO group: its training step, its question, how many groups hold the question's
# episodes at that step, and how many episodes they are.
GROUPS = (
    "SELECT train_step, question, count(DISTINCT group_index), count(*) FROM episodes "
    "GROUP BY train_step, question ORDER BY train_step, question"
)


@pytest.fixture
def at_once(tmp_path: Path) -> Iterator[Store]:
    """A second store, for the same files imported in one go."""
    st = Store(f"sqlite:///{tmp_path / 'at-once.db'}")
    yield st
    st.close()


def _task_episode(question: str, sample: int) -> dict[str, Any]:
    """An rLLM Episode of the task asking `question` (its `task_hash` is the task's)."""
    episode = _rllm_episode("task", sample, sample == 0)
    episode["id"] = f"{question}:{sample}"
    episode["task"] = {"question": question, "db_id": "concerts"}
    return episode


def test_an_rllm_task_logged_over_two_imports_stays_one_group(
    store: Store, at_once: Store, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    # `EpisodeLogger.log_episode` writes each episode's file as it finishes: an import made
    # while step 3 still runs finds two of each task's four episodes.
    for sample in (0, 1):
        for question in (COUNT_Q, FRANCE_Q):
            rllm_log_episode(logs, _task_episode(question, sample), step=3)
    run_import(store, logs, "rllm")
    for sample in (2, 3):
        for question in (COUNT_Q, FRANCE_Q):
            rllm_log_episode(logs, _task_episode(question, sample), step=3)
    rllm_log_episode(logs, _task_episode(COUNT_Q, 0), step=4)
    run_import(store, logs, "rllm")
    run_import(at_once, logs, "rllm")

    expected = [(3, COUNT_Q, 1, 4), (3, FRANCE_Q, 1, 4), (4, COUNT_Q, 1, 1)]
    assert rows(store, GROUPS) == rows(at_once, GROUPS) == expected
    assert rows(store, "SELECT count(DISTINCT group_index) FROM episodes") == [(3,)]


def _chat_line(question: str, group: str, reward: float) -> str:
    """A chat-log line as docs/import.md ("A chat log") gives the format: OpenAI chat messages,
    the reward, the step and the trainer's group id."""
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "<solution>SELECT COUNT(*) FROM singer</solution>"},
    ]
    line = {"messages": messages, "reward": reward, "step": 7, "group": group}
    return json.dumps(line) + "\n"


def test_a_chat_log_appended_to_keeps_its_groups(
    store: Store, at_once: Store, tmp_path: Path
) -> None:
    log = tmp_path / "chats.jsonl"
    with log.open("a", encoding="utf-8") as f:  # a loop's logger appends a line a rollout
        f.write(_chat_line(COUNT_Q, "uid-a", 1.0) + _chat_line(FRANCE_Q, "uid-b", 0.0))
    run_import(store, log, "chat", fmt="messages")
    with log.open("a", encoding="utf-8") as f:
        f.write(_chat_line(COUNT_Q, "uid-a", 0.0) + _chat_line(FRANCE_Q, "uid-b", 1.0))
    run_import(store, log, "chat", fmt="messages")
    run_import(at_once, log, "chat", fmt="messages")

    expected = [(7, COUNT_Q, 1, 2), (7, FRANCE_Q, 1, 2)]
    assert rows(store, GROUPS) == rows(at_once, GROUPS) == expected


def test_a_recorder_resumed_keeps_its_groups(store: Store) -> None:
    from app.recorder import Recorder

    turns = [{"role": "assistant", "content": "<solution>SELECT COUNT(*) FROM singer</solution>"}]

    def record(rec: Recorder) -> None:
        for reward in (0.0, 1.0):
            rec.episode(question=COUNT_Q, turns=turns, reward=reward, step=2, group="uid-9")

    with pytest.raises(RuntimeError), Recorder(store, run="loop", kind="training") as rec:
        record(rec)
        raise RuntimeError("the trainer stopped")  # the run reads failed, its rollouts kept
    with Recorder(store, run="loop", kind="training", resume=True) as rec:
        record(rec)  # the same step, played on
    assert rows(store, GROUPS) == [(2, COUNT_Q, 1, 4)]
