"""The GRPO groups page on rewards of any finite size (a Recorder and imports take any): the std
chart keeps to a bounded number of bins, each named by its real ends, and a std too large to
compute is counted apart and said so, where the page once raised or drew millions of bars."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from app.dashboard.groups import charts
from app.recorder import Recorder
from storage import groups
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env


@dataclass(frozen=True)
class LargeRewards:
    url: str
    wide: int
    """q-large's rewards -1000, 0 and 1000 (std 1000), q-small's 0 and 1."""
    huge: int
    """The same with 1e155 for 1000: the sums of squares overflow a float."""


@pytest.fixture(scope="module")
def large_store(tmp_path_factory: pytest.TempPathFactory) -> LargeRewards:
    url = str(tmp_path_factory.mktemp("large-rewards") / "store.db")
    turns = [{"role": "assistant", "content": "ANSWER 6"}]
    for name, scale in (("wide", 1e3), ("huge", 1e155)):
        with Recorder(url, run=name) as rec:
            for qid, rewards in (("q-large", (-scale, 0.0, scale)), ("q-small", (0.0, 1.0))):
                for reward in rewards:
                    rec.episode(question=qid, question_id=qid, turns=turns, reward=reward)
    store = Store(url, read_only=True)
    ids = {r.name: r.id for r in store.list_runs()}
    store.close()
    return LargeRewards(url, ids["wide"], ids["huge"])


@pytest.fixture
def large(large_store: LargeRewards, monkeypatch: pytest.MonkeyPatch) -> LargeRewards:
    serve_env(monkeypatch, large_store.url)
    return large_store


def _correctness_bars(run_id: int) -> tuple[dict[str, int], str]:
    """The std chart's correctness bars (label -> groups) and the page's text."""
    at = open_page("groups/page.py", run=str(run_id))  # fails on any exception
    [chart] = at.get("plotly_chart")
    traces = json.loads(chart.proto.spec)["data"]
    (correctness,) = [t for t in traces if t["name"] == "correctness"]
    return dict(zip(correctness["x"], correctness["y"], strict=True)), texts(at)


def test_large_rewards_are_charted_in_a_bounded_number_of_round_bins(large: LargeRewards) -> None:
    bars, _ = _correctness_bars(large.wide)
    # Before: a bar of 0.05 for every step up to a std of 1,000, twenty thousand of them.
    assert len(bars) <= groups.STD_BINS + 1
    assert {label: n for label, n in bars.items() if n} == {"0–50": 1, "1,000–1,050": 1}


def test_a_std_too_large_to_compute_is_counted_apart_and_said_so(large: LargeRewards) -> None:
    # Before: OverflowError, a traceback where the page was.
    bars, shown = _correctness_bars(large.huge)
    assert {label: n for label, n in bars.items() if n} == {"0.70–0.75": 1, charts.TOO_LARGE: 1}
    assert list(bars)[-1] == charts.TOO_LARGE
    assert "The rewards of 1 group are too large for a std to be computed" in shown
    at = open_page("groups/page.py", run=str(large.huge))
    table = at.dataframe[0].value
    assert list(table["question id"]) == ["q-large", "q-small"]
    assert math.isinf(table["std"].iloc[0])


@pytest.mark.parametrize(
    ("index", "width", "label"),
    [
        (3, 0.05, "0.15–0.20"),
        (3, 0.1, "0.3–0.4"),
        (20, 50.0, "1,000–1,050"),
        (3, 5e6, "1.5e+07–2e+07"),
    ],
)
def test_a_bins_label_names_its_ends(index: int, width: float, label: str) -> None:
    assert charts.std_bin_label(index, width) == label
