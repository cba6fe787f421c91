"""The Training page's rewards by name: each reward a trainer's functions or a file's columns
gave, as TRL logs `rewards/<name>/mean`, beside the episode reward; on runs a Recorder wrote
through the store's one write path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from app.recorder import Recorder
from tests.app.dashboard.apptest import open_page

_TURNS = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER: 5"}]
HOSTILE = "<b>fmt</b>"


def _record(url: str, run: str, rewards: Any) -> int:
    """Three steps of four samples; `rewards(step, sample)` -> (total, parts or None)."""
    with Recorder(url, run=run, kind="training") as rec:
        for step in range(3):
            for sample in range(4):
                total, parts = rewards(step, sample)
                rec.episode(question="Q?", turns=_TURNS, reward=total, rewards=parts, step=step)
    return rec.run_id


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv(ENV_STORE, url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return url


def _charts(run_id: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    at = open_page("training/page.py", run=str(run_id))
    charts = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        charts[spec["layout"]["title"]["text"]] = spec
    return charts, [c.value for c in at.caption]


def test_each_named_reward_is_drawn_by_step_beside_the_episode_reward(url: str) -> None:
    # The trainer trains on a correctness reward and a format reward; the episode's reward
    # is their weighted sum. Correct on samples below the step; format rewarded on even ones.
    def parts(step: int, sample: int) -> tuple[float, dict[str, float]]:
        correct, fmt = float(sample < step), float(sample % 2 == 0)
        return correct + 0.5 * fmt, {"correct": correct, HOSTILE: fmt}

    charts, captions = _charts(_record(url, "two-rewards", parts))
    named = charts["Rewards by name"]
    lines = {d["name"]: d["y"] for d in named["data"]}
    # Means per step, as TRL logs `rewards/<name>/mean`; a name is text, never markup.
    assert lines == {"&lt;b&gt;fmt&lt;/b&gt;": [0.5, 0.5, 0.5], "correct": [0.0, 0.25, 0.5]}
    assert all(d["showlegend"] for d in named["data"])  # a lone line still says its name
    assert charts["Reward"]["data"][0]["y"] == pytest.approx([0.25, 0.5, 0.75])
    assert not any("rewards by name" in c for c in captions)


def test_a_run_without_named_rewards_says_it_draws_none(url: str) -> None:
    charts, captions = _charts(_record(url, "no-parts", lambda step, sample: (1.0, None)))
    assert "Rewards by name" not in charts
    assert any(
        c.startswith("Not drawn, as this run's records hold none: rewards by name")
        for c in captions
    )


def test_a_single_named_reward_that_is_the_episode_reward_is_not_drawn_twice(url: str) -> None:
    def score(step: int, sample: int) -> tuple[float, dict[str, float]]:
        value = float(sample < step)
        return value, {"score": value}

    charts, captions = _charts(_record(url, "one-score", score))
    assert "Rewards by name" not in charts and "Reward" in charts
    assert not any("rewards by name" in c for c in captions)  # held, and drawn as the reward
