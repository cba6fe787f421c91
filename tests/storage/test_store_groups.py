"""GRPO groups from the store: per-group statistics in SQL, one group's members with their
advantages, zero-variance groups, unfinished samples left out."""

from __future__ import annotations

from collections import Counter

import pytest

from rollout_core import grpo
from rollout_core.records import IterationBatch
from storage.read_models import GroupKey
from storage.store import Store
from tests.support.records import play, spec, start
from tests.support.stores import write_run

# question -> (outcome, reward) of each sample
_GROUPS = {
    "q-mixed": [("correct", 1.1), ("wrong", 0.0), ("wrong", 0.05), ("correct", 1.0)],
    "q-flat": [("wrong", 0.0)] * 4,
    "q-all-right": [("correct", 1.1)] * 4,
    "q-one": [("budget_exhausted", -0.02)],
}


def _fill(store: Store) -> int:
    played = [
        play(qid, i, outcome, reward, 2)  # type: ignore[arg-type]
        for qid, samples in _GROUPS.items()
        for i, (outcome, reward) in enumerate(samples)
    ]
    playing = IterationBatch(started=[start("q-one", 1)])  # still playing: not a member
    return write_run(store, spec("grpo", samples=4), [*played, playing], planned=16, status=None)


def test_the_overview_has_every_group_with_trls_statistics_highest_std_first(
    store: Store,
) -> None:
    run_id = _fill(store)
    overview = store.group_overview(run_id)
    keys = [g.key.question_id for g in overview.groups]
    assert keys[0] == "q-mixed" and set(keys) == set(_GROUPS)
    by_key = {g.key.question_id: g for g in overview.groups}
    rewards = [r for _, r in _GROUPS["q-mixed"]]
    mixed = by_key["q-mixed"]
    assert (mixed.size, mixed.correct) == (4, 2)
    assert mixed.mean == pytest.approx(grpo.group_mean(rewards))
    assert mixed.std == pytest.approx(grpo.group_std(rewards), rel=1e-9)
    assert (mixed.lowest, mixed.highest) == (0.0, 1.1)
    assert [by_key[k].has_signal for k in ("q-mixed", "q-flat", "q-all-right", "q-one")] == [
        True, False, False, False
    ]  # fmt: skip
    assert by_key["q-all-right"].std == 0.0  # exactly, not the sums' rounding
    assert overview.with_signal == 1 and overview.signal_fraction == 0.25
    assert overview.questions["q-mixed"] == "How many rows for q-mixed?"


def test_the_overview_sums_up_every_group_and_lists_the_highest_std(store: Store) -> None:
    run_id = _fill(store)
    overview = store.group_overview(run_id, limit=1)
    # Listed: the first group alone, with its question's text and no other.
    assert [g.key.question_id for g in overview.groups] == ["q-mixed"]
    assert list(overview.questions) == ["q-mixed"]
    # Summed up: every group, listed or not.
    assert (overview.total, overview.with_signal) == (4, 1)
    assert (overview.all_correct, overview.none_correct) == (1, 2)  # none: q-flat and q-one
    assert (overview.episodes, overview.largest) == (13, 4)
    assert overview.mean_samples == 13 / 4
    # q-mixed's std (0.59) in the 0.55-0.60 bin; the three groups without signal in none.
    assert 0.55 < grpo.group_std([r for _, r in _GROUPS["q-mixed"]]) < 0.6
    assert overview.std_counts == {"correctness": (0,) * 11 + (1,), "shaping only": ()}


def test_the_overview_counts_every_group_by_the_source_of_its_spread(store: Store) -> None:
    # Correctness: right and wrong samples. Shaping only: rewards that differ though no sample
    # is right (penalties), or every one is. None: equal rewards, right or wrong.
    groups = {
        "q-right-wrong": [("correct", 1.0), ("wrong", 0.0)],
        "q-penalties": [("wrong", 0.0), ("wrong", -0.01), ("wrong", -0.02), ("wrong", 0.0)],
        "q-right-shaped": [("correct", 1.1), ("correct", 1.0)],
        "q-flat-wrong": [("wrong", 0.0), ("budget_exhausted", 0.0)],
        "q-flat-right": [("correct", 1.0), ("correct", 1.0)],
    }
    run_id = store.create_run(spec("sources", samples=4), episodes_planned=12)
    sink = store.sink(run_id)
    for qid, samples in groups.items():
        for i, (outcome, reward) in enumerate(samples):
            sink.write(play(qid, i, outcome, reward, 1))  # type: ignore[arg-type]
    overview = store.group_overview(run_id, limit=1)  # one listed: the counts cover them all
    assert overview.by_source == {"correctness": 1, "shaping only": 2, "none": 2}
    assert (overview.with_signal, overview.total) == (3, 5)
    assert (overview.none_correct, overview.all_correct) == (2, 2)
    # Stds 0.71 (correctness), 0.0096 and 0.071 (shaping only), binned by source.
    assert overview.std_counts == {"correctness": (0,) * 14 + (1,), "shaping only": (1, 1)}
    # The rule the dashboard labels each group by is the one the store counts by.
    every = store.group_overview(run_id)
    assert Counter(g.source for g in every.groups) == overview.by_source
    by_key = {g.key.question_id: g.source for g in every.groups}
    assert by_key == {
        "q-right-wrong": "correctness",
        "q-penalties": "shaping only",
        "q-right-shaped": "shaping only",
        "q-flat-wrong": "none",
        "q-flat-right": "none",
    }


def test_the_overview_lists_every_group_of_a_question_when_asked(store: Store) -> None:
    run_id = _fill(store)
    overview = store.group_overview(run_id, limit=1, question="q-flat")
    assert [(g.key.question_id, g.size, g.std) for g in overview.groups] == [("q-flat", 4, 0.0)]
    assert list(overview.questions) == ["q-flat"]
    assert overview.total == 4  # the run's summary, whatever is listed
    none = store.group_overview(run_id, question="q-nope")
    assert none.groups == [] and none.total == 4


def test_std_bins_count_a_boundary_std_in_the_bin_it_starts(store: Store) -> None:
    # Two samples 0 and h have std h / sqrt(2): here exactly 0.15 and 0.3, the starts of the
    # 0.15-0.20 and 0.30-0.35 bins, though 0.15 / 0.05 and 0.3 / 0.05 round below 3 and 6.
    run_id = store.create_run(spec("bins", samples=2), episodes_planned=4)
    sink = store.sink(run_id)
    for qid, std in (("q-a", 0.15), ("q-b", 0.3)):
        sink.write(play(qid, 0, "wrong", 0.0, 1))
        sink.write(play(qid, 1, "correct", std * 2**0.5, 1))
    overview = store.group_overview(run_id)
    assert sorted(g.std for g in overview.groups) == [0.15, 0.3]
    assert overview.std_counts == {"correctness": (0, 0, 0, 1, 0, 0, 1), "shaping only": ()}


def test_a_group_has_its_members_by_sample_with_advantages_and_steps(store: Store) -> None:
    run_id = _fill(store)
    group = store.get_group(run_id, GroupKey("q-mixed"))
    assert group is not None
    rewards = [r for _, r in _GROUPS["q-mixed"]]
    assert [m.detail.summary.sample_index for m in group.members] == [0, 1, 2, 3]
    assert [m.advantage for m in group.members] == pytest.approx(grpo.advantages(rewards))
    assert all(len(m.detail.steps) == 2 for m in group.members)
    assert group.stats.std == pytest.approx(store.group_overview(run_id).groups[0].std)

    flat = store.get_group(run_id, GroupKey("q-flat"))
    assert flat is not None and not flat.stats.has_signal
    assert [m.advantage for m in flat.members] == [0.0] * 4

    one = store.get_group(run_id, GroupKey("q-one"))
    assert one is not None and [m.detail.summary.sample_index for m in one.members] == [0]
    # Its size alone, as Replay asks before linking an episode's group.
    sizes = [store.group_size(run_id, GroupKey(q)) for q in ("q-mixed", "q-one", "q-nope")]
    assert sizes == [4, 1, 0]


def test_an_unknown_group_or_run_has_none(store: Store) -> None:
    run_id = _fill(store)
    assert store.get_group(run_id, GroupKey("q-nope")) is None
    assert store.get_group(run_id + 100, GroupKey("q-mixed")) is None
    empty = store.group_overview(run_id + 100)
    assert empty.groups == [] and empty.signal_fraction is None
