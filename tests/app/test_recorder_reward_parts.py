"""A Recorder's `rewards=`: each part is stored under its name as text, so two names that read
the same as text, or an empty one, are refused before the rollout is held."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.recorder import Recorder, RecorderError
from tests.app.importers.conftest import rows

TURNS = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER 5"}]


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        # Stored by name as text, one of the two was lost without a word.
        ({1: 0.5, "1": 0.7}, "rewards holds 1 and '1', both named '1' in the store: give each"),
        ({"": 0.2, "correct": 1.0}, "rewards holds a part named '': give each part a name"),
        ({" ": 0.2}, "rewards holds a part named ' ': give each part a name"),
    ],
)
def test_reward_parts_that_cannot_each_keep_a_name_are_refused(
    tmp_path: Path, rewards: dict[Any, float], message: str
) -> None:
    with Recorder(f"sqlite:///{tmp_path / 's.db'}", run="r") as rec:
        with pytest.raises(RecorderError, match="^" + re.escape(message)):
            rec.episode(question="Q?", turns=TURNS, reward=1.2, rewards=rewards)
        named_apart: dict[Any, float] = {1: 0.5, "format": 0.7}  # a name not text is taken
        rec.episode(question="Q?", turns=TURNS, reward=1.2, rewards=named_apart)
    assert rows(rec.store, "SELECT count(*) FROM episodes") == [(1,)]
    assert rows(rec.store, "SELECT name, value FROM episode_rewards ORDER BY name") == [
        ("1", 0.5),
        ("format", 0.7),
    ]
