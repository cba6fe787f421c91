"""A training run rollscope recorded whose trainer rewarded correctness alone: GRPO groups and
Replay follow the advantages and rewards the trainer reported, not the environment's shaping
(`app.training.trainer_scores` records them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from rollout_core import grpo
from storage.read_models import GroupKey
from storage.store import Store
from storage.trainer_scores import TrainerScore
from tests.app.dashboard.apptest import open_page, texts
from tests.support.records import spec
from tests.support.stores import play_group


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: str(m.value) for m in at.metric}


@pytest.fixture
def trained_on_correctness(tmp_path: Path, serve_store: Callable[[str], None]) -> int:
    """q1 all wrong, apart by penalties; q2 right and wrong; each scored by a trainer whose
    one reward function is correctness (`correct_reward`)."""
    url = str(tmp_path / "correct-reward.db")
    store = Store(url)
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=8)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(4), [0.0, -0.01, -0.02, 0.0], (0, 0))
    play_group(sink, "q2", range(4), [1.0, 0.0, 0.0, 1.1], (0, 1))
    scores = []
    for key in (GroupKey("q1", 0), GroupKey("q2", 1)):
        found = store.get_group(run_id, key)
        assert found is not None
        correct = [1.0 if m.detail.summary.outcome == "correct" else 0.0 for m in found.members]
        scores += [
            TrainerScore(m.detail.summary.id, a, {"correct_reward": c})
            for m, a, c in zip(found.members, grpo.advantages(correct), correct, strict=True)
        ]
    store.record_trainer_scores(run_id, scores)
    store.close()
    serve_store(url)
    return run_id


def test_groups_the_trainer_gave_no_advantage_count_as_none(trained_on_correctness: int) -> None:
    # Before: q1 counted as "shaping only", with a warning that its penalties are noise the
    # trainer learns from, though the trainer never saw them.
    at = open_page("groups/page.py", run=str(trained_on_correctness))
    metrics = _metrics(at)
    assert metrics["shaping only"] == "0 (0.0%)"
    assert metrics["no advantage"] == "1 (50.0%)"
    assert metrics["correctness signal"] == "1 (50.0%)"
    assert "Counted by the advantages the trainer gave, where it reported them (2 of 2" in (
        texts(at)
    )
    assert not at.warning
    table = at.dataframe[0].value.set_index("question id")
    assert table.loc["q1", "spread from"] == "none: no advantage"


def test_a_group_shows_the_trainers_advantages_beside_the_computed_ones(
    trained_on_correctness: int,
) -> None:
    at = open_page("groups/page.py", run=str(trained_on_correctness), question="q1", group="0")
    assert _metrics(at)["spread from"] == "none: no advantage"
    # Not "advantages from shaping alone", nor "zero reward variance".
    assert [w.value for w in at.warning] == [
        "The trainer gave every sample advantage 0, so GRPO learned nothing from this group."
    ]
    members = at.dataframe[0].value
    assert list(members["trainer's advantage"]) == [0.0] * 4
    assert max(abs(members["advantage"])) > 0.9  # what the shaped rewards would have given
    assert "The trainer gave these samples other advantages" in texts(at)


def test_replay_shows_the_trainers_rewards_apart_from_the_environments(
    trained_on_correctness: int, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "correct-reward.db"), read_only=True)
    try:
        found = store.get_group(trained_on_correctness, GroupKey("q1", 0))
        assert found is not None
        episode = found.members[1].detail.summary.id
    finally:
        store.close()
    at = open_page("replay/page.py", episode=str(episode))
    shown = texts(at)
    assert "reward -0.010" in shown
    # As markdown: the trainer names its functions.
    assert "the trainer's rewards: correct\\_reward 0\\.000 (the reward above is the" in shown
    assert "trainer's advantage +0.000" in shown
