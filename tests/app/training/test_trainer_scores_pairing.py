"""Pairing TRL's log of a scored batch with the episodes rollscope played for it
(`app.training.trainer_scores.read_scores`): only the batch played, only this process's part.

The trainer here holds TRL's log as `GRPOTrainer._generate_and_score_completions` of the
pinned release fills it (`trainer._logs`: deques of the prompts, each reward function's
values and the advantages, gathered over the processes in process order); the real trainer's
log is checked against its completions files in test_trl_training.py."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from app.training.trainer_scores import PlayedBatch, read_scores


@dataclass
class _Accelerator:
    num_processes: int = 1
    process_index: int = 0


@dataclass
class _Trainer:
    _logs: dict[str, Any]
    accelerator: _Accelerator = field(default_factory=_Accelerator)


def _prompt(q: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": q}]


def _logs(prompts: list[Any], advantages: list[float], correct: list[float], maxlen: int) -> Any:
    return {
        "prompt": deque(prompts, maxlen=maxlen),
        "advantages": deque(advantages, maxlen=maxlen),
        "rewards": {"correct_reward": deque(correct, maxlen=maxlen)},
    }


def test_the_batch_played_pairs_row_by_row() -> None:
    prompts = [_prompt("a")] * 2 + [_prompt("b")] * 2
    trainer = _Trainer(_logs(prompts, [1.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], 8))
    scores = read_scores(trainer, PlayedBatch(prompts, [11, 12, 13, 14]))
    assert [(s.episode_id, s.advantage, dict(s.rewards)) for s in scores] == [
        (11, 1.0, {"correct_reward": 1.0}),
        (12, -1.0, {"correct_reward": 0.0}),
        (13, 0.0, {"correct_reward": 0.0}),
        (14, 0.0, {"correct_reward": 0.0}),
    ]


def test_a_log_of_another_batch_or_a_part_of_it_gives_nothing() -> None:
    played = PlayedBatch([_prompt("a")] * 4, [1, 2, 3, 4])
    other = _Trainer(_logs([_prompt("b")] * 4, [0.0] * 4, [0.0] * 4, 8))
    assert read_scores(other, played) == []
    # A batch larger than TRL keeps (its deques hold a generation batch): rows are missing.
    cut = _Trainer(_logs([_prompt("a")] * 4, [0.0] * 4, [0.0] * 4, 3))
    assert read_scores(cut, played) == []
    assert read_scores(object(), played) == []  # no log at all: another TRL


def test_each_process_takes_its_own_part_of_the_gathered_log() -> None:
    mine = [_prompt("b")] * 2
    gathered = [_prompt("a")] * 2 + mine  # process 0's rows, then process 1's
    trainer = _Trainer(
        _logs(gathered, [0.5, -0.5, 2.0, -2.0], [1.0, 0.0, 1.0, 0.0], 8), _Accelerator(2, 1)
    )
    scores = read_scores(trainer, PlayedBatch(mine, [7, 8]))
    assert [(s.episode_id, s.advantage) for s in scores] == [(7, 2.0), (8, -2.0)]
