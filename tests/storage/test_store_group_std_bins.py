"""The groups' std histogram over rewards of any finite size: bins of 0.05 for ordinary
rewards, a bounded number of round-width bins for large ones, and a std too large to compute
counted apart, never an unbounded list of bins nor an overflow."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.recorder import Recorder
from storage import groups
from storage.store import Store


def recorded(tmp_path: Path, scale: float) -> tuple[Store, int]:
    """A Recorder's batch: q-large's rewards -scale, 0 and scale (one right), q-small's 0 and 1."""
    url = str(tmp_path / "store.db")
    turns = [{"role": "assistant", "content": "ANSWER 6"}]
    with Recorder(url, run="large") as rec:
        for question, rewards in (("large", (-scale, 0.0, scale)), ("small", (0.0, 1.0))):
            for reward in rewards:
                qid = f"q-{question}"
                rec.episode(question=qid, question_id=qid, turns=turns, reward=reward)
    store = Store(url, read_only=True)
    (run,) = store.list_runs()
    return store, run.id


def test_ordinary_rewards_keep_bins_of_a_twentieth() -> None:
    assert groups.std_bin_width(0.0) == groups.std_bin_width(1.9) == groups.STD_BIN


@pytest.mark.parametrize(
    ("largest", "width"), [(2.0, 0.05), (3.0, 0.1), (1e3, 50.0), (1e5, 5e3), (1e8, 5e6)]
)
def test_a_wide_spread_gets_round_bins_of_a_bounded_number(largest: float, width: float) -> None:
    assert groups.std_bin_width(largest) == pytest.approx(width)
    assert largest / groups.std_bin_width(largest) <= groups.STD_BINS
    assert math.isfinite(groups.std_bin_width(1.7e308))


def test_large_rewards_are_counted_in_a_bounded_number_of_bins(tmp_path: Path) -> None:
    # Before: a bin of 0.05 for every step up to a std of 1e5, two million of them.
    store, run_id = recorded(tmp_path, 1e5)
    found = store.group_overview(run_id)
    counts = found.std_counts["correctness"]
    assert len(counts) <= groups.STD_BINS + 1 and sum(counts) == 2
    assert found.std_bin == 5e3
    large = next(g for g in found.groups if g.key.question_id == "q-large")
    assert counts[int(large.std / found.std_bin)] == 1
    assert counts[0] == 1  # q-small's std of 0.7 in the first bin of 5,000
    assert found.std_beyond == {"correctness": 0, "shaping only": 0}


def test_a_std_too_large_to_compute_is_counted_apart(tmp_path: Path) -> None:
    # Before: OverflowError, the sums of squares being inf.
    store, run_id = recorded(tmp_path, 1e155)
    found = store.group_overview(run_id)
    assert found.std_beyond == {"correctness": 1, "shaping only": 0}
    assert found.std_bin == groups.STD_BIN and sum(found.std_counts["correctness"]) == 1
    assert found.by_source["correctness"] == 2
    first = found.groups[0]  # the highest std listed first
    assert (first.key.question_id, first.std) == ("q-large", math.inf)
