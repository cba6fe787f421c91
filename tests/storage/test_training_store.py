"""Training runs in the store: episodes tagged with their training step and group, and the
Training page's reads."""

from __future__ import annotations

import math
import sqlite3
import statistics
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite

from rollout_core.records import IterationBatch
from storage.groups import stats_query
from storage.read_models import GroupKey, GroupOverview
from storage.store import Store
from storage.training import (
    DrawnQuestion,
    counters,
    played_steps,
    question_episodes,
    questions_query,
    steps_query,
    training_questions,
    training_steps,
)
from tests.support.records import finish, spec, start, step
from tests.support.stores import play_group


@pytest.fixture
def training(store: Store) -> tuple[Store, int]:
    """A training run of two steps: step 0 with a mixed and a uniform group, step 1 one group."""
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=10)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(3), [1.0, 0.0, 0.1], (0, 0), unparsed=1)
    play_group(sink, "q2", range(3), [0.0, 0.0, 0.0], (0, 1))
    play_group(sink, "q1", range(3, 6), [1.0, 1.0, 0.0], (1, 2))
    return store, run_id


def test_steps_sum_up_rewards_groups_and_tokens(training: tuple[Store, int]) -> None:
    store, run_id = training
    first, second = training_steps(store, run_id)
    assert (first.train_step, first.episodes, first.groups) == (0, 6, 2)
    rewards = [1.0, 0.0, 0.1, 0.0, 0.0, 0.0]
    assert first.reward == pytest.approx(statistics.mean(rewards))
    assert first.reward_std == pytest.approx(statistics.stdev(rewards))
    assert first.group_reward_std == pytest.approx(statistics.stdev([1.0, 0.0, 0.1]) / 2)
    assert first.frac_reward_zero_std == 0.5  # q2's group all got 0.0
    assert first.accuracy == pytest.approx(1 / 6)
    assert first.unparsed_rate == pytest.approx(1 / 6)
    assert first.mean_steps == 1.0
    assert first.mean_logprob == pytest.approx(-1.5)
    assert first.mean_tokens == 2.0
    assert (second.train_step, second.episodes) == (1, 3)
    assert second.accuracy == pytest.approx(2 / 3)
    assert second.frac_reward_zero_std == 0.0
    # What each step drew, and where its groups' spread came from.
    assert first.drawn == (DrawnQuestion("q1", 1, 3), DrawnQuestion("q2", 0, 3))
    assert second.drawn == (DrawnQuestion("q1", 2, 3),)
    assert first.by_source == {"correctness": 1, "shaping only": 0, "none": 1}
    assert second.by_source == {"correctness": 1, "shaping only": 0, "none": 0}


def test_steps_count_their_groups_by_source_as_the_groups_overview_does(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=10)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(2), [0.0, -0.01], (0, 0))  # shaping only: a penalty
    play_group(sink, "q1", range(2, 4), [1.0, 0.0], (0, 1))  # correctness
    play_group(sink, "q2", range(2), [1.0, 1.0], (0, 2))  # none: all right, equal
    play_group(sink, "q2", range(2, 4), [1.0, 1.1], (1, 3))  # shaping only: all right
    play_group(sink, "q3", range(1), [0.0], (1, 4))  # none: one sample
    first, second = training_steps(store, run_id)
    assert first.by_source == {"correctness": 1, "shaping only": 1, "none": 1}
    assert second.by_source == {"correctness": 0, "shaping only": 1, "none": 1}
    # A question's two groups at one step are counted together, in the order of the groups.
    assert first.drawn == (DrawnQuestion("q1", 1, 4), DrawnQuestion("q2", 2, 2))
    assert second.drawn == (DrawnQuestion("q2", 2, 2), DrawnQuestion("q3", 0, 1))
    overview = store.group_overview(run_id)
    assert {k: first.by_source[k] + second.by_source[k] for k in first.by_source} == (
        overview.by_source
    )


def test_a_range_of_training_steps_sums_and_lists_only_its_groups(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=12)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(2), [1.0, 0.0], (0, 0))  # correctness
    play_group(sink, "q1", range(2, 4), [0.0, 0.0], (1, 1))  # none
    play_group(sink, "q2", range(2), [1.0, 1.1], (1, 2))  # shaping only
    play_group(sink, "q2", range(2, 4), [1.0, 0.0], (2, 3))  # correctness
    play_group(sink, "q3", range(4), [0.0, 1.0, 1.0, 0.0], (3, 4))  # correctness

    def keys(found: GroupOverview) -> list[tuple[int | None, str]]:
        return sorted((g.key.train_step, g.key.question_id) for g in found.groups)

    middle = store.group_overview(run_id, min_train_step=1, max_train_step=2)
    assert keys(middle) == [(1, "q1"), (1, "q2"), (2, "q2")]
    assert (middle.total, middle.episodes, middle.largest) == (3, 6, 2)
    assert middle.by_source == {"correctness": 1, "shaping only": 1, "none": 1}
    assert keys(store.group_overview(run_id, min_train_step=2)) == [(2, "q2"), (3, "q3")]
    assert keys(store.group_overview(run_id, max_train_step=0)) == [(0, "q1")]
    assert keys(store.group_overview(run_id, min_train_step=1, question="q1")) == [(1, "q1")]
    none = store.group_overview(run_id, min_train_step=4)
    assert (none.total, none.groups) == (0, [])


def test_a_question_across_training_in_order(training: tuple[Store, int]) -> None:
    store, run_id = training
    episodes = question_episodes(store, run_id, "q1")
    assert [(e.train_step, e.group_index, e.sample_index) for e in episodes] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 0, 2),
        (1, 2, 3),
        (1, 2, 4),
        (1, 2, 5),
    ]
    assert [e.reward for e in episodes] == [1.0, 0.0, 0.1, 1.0, 1.0, 0.0]
    listed = {q.question_id: q for q in training_questions(store, run_id)}
    assert (listed["q1"].episodes, listed["q1"].correct) == (6, 3)
    assert (listed["q1"].first_step, listed["q1"].last_step) == (0, 1)
    assert (listed["q2"].first_step, listed["q2"].last_step) == (0, 0)


def test_a_questions_steps_and_its_episodes_at_some_of_them(training: tuple[Store, int]) -> None:
    store, run_id = training
    assert played_steps(store, run_id, "q1") == [0, 1]
    assert played_steps(store, run_id, "q2") == [0]
    assert played_steps(store, run_id, "q-none") == []
    at_one = question_episodes(store, run_id, "q1", [1])
    assert [(e.train_step, e.sample_index) for e in at_one] == [(1, 3), (1, 4), (1, 5)]
    assert question_episodes(store, run_id, "q2", [1]) == []


def test_counters_go_on_after_the_last_sample_and_group(training: tuple[Store, int]) -> None:
    store, run_id = training
    numbering = counters(store, run_id)
    assert numbering.next_sample == {"q1": 6, "q2": 3}
    assert numbering.next_group == 3


def test_a_failed_write_leaves_nothing_behind(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=1)
    sink = store.sink(run_id)
    with pytest.raises(ValueError, match="has no started episode"):
        sink.write(IterationBatch(started=[start("q1", 0)], steps=[step("q7", 0, 1)]))
    assert training_questions(store, run_id) == []
    assert store.finished_keys(run_id) == set()
    # The same episode can be written once the batch is right: no cache kept a dead id.
    play_group(sink, "q1", range(1), [1.0], (0, 0))
    assert [s.episodes for s in training_steps(store, run_id)] == [1]


def test_other_runs_have_no_training_steps(store: Store) -> None:
    run_id = store.create_run(spec("batch"), episodes_planned=1)
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=[start("q1", 0)]))
    sink.write(
        IterationBatch(
            steps=[step("q1", 0, 1, done=True)], finished=[finish("q1", 0, "wrong", 0.0, 1)]
        )
    )
    assert training_steps(store, run_id) == []
    assert counters(store, run_id).next_group == 0


def test_one_episode_groups_have_no_spread(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=1)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(1), [0.5], (4, 0))
    (only,) = training_steps(store, run_id)
    assert only.reward_std is None and only.group_reward_std is None
    assert only.frac_reward_zero_std == 1.0
    assert math.isclose(only.reward, 0.5)


def test_a_training_runs_groups_are_one_question_at_one_step(store: Store) -> None:
    # All right at step 0, all wrong at step 1: GRPO learned nothing from either group. Pooled
    # over the run, the question's six samples looked like one group with signal.
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=6)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(3), [1.0, 1.0, 1.0], (0, 0))
    play_group(sink, "q1", range(3, 6), [0.0, 0.0, 0.0], (1, 1))

    overview = store.group_overview(run_id)
    found = sorted(
        (g.key.train_step, g.key.group_index, g.size, g.has_signal) for g in overview.groups
    )
    assert found == [(0, 0, 3, False), (1, 1, 3, False)]
    assert overview.signal_fraction == 0.0
    # As the Training page counts them, step by step.
    steps = training_steps(store, run_id)
    zero_std = sum(s.frac_reward_zero_std * s.groups for s in steps)
    assert zero_std == overview.total - overview.with_signal == 2

    # A link names the group by its number alone; the step comes back with the members.
    group = store.get_group(run_id, GroupKey("q1", 1))
    assert group is not None
    assert group.stats.key == GroupKey("q1", 1, 1) and str(group.stats.key) == "q1 at step 1"
    assert [m.detail.summary.sample_index for m in group.members] == [3, 4, 5]
    assert store.get_group(run_id, GroupKey("q1", 7)) is None


@pytest.mark.parametrize("training", [False, True], ids=["batch run", "training run"])
def test_a_runs_groups_are_read_from_one_index_alone(tmp_path: Path, training: bool) -> None:
    # A training run of 1,000 steps x 256 rollouts has 64k groups or more: its overview must
    # read one covering index in its order, not every episode's row and then sort them.
    path = tmp_path / "plan.db"
    Store(f"sqlite:///{path}").close()  # the schema at head
    query = stats_query(1, training).compile(
        dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}
    )
    with closing(sqlite3.connect(path)) as conn:
        plan = " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    index = "ix_episodes_run_train_step_metrics" if training else "ix_episodes_run_question_results"
    assert f"USING COVERING INDEX {index} (run_id=?)" in plan
    assert "TEMP B-TREE" not in plan


def test_a_training_runs_steps_are_summed_from_its_index_alone(tmp_path: Path) -> None:
    # A row per group, with the questions each step drew: from the training index in its
    # order, never a sort of tens of thousands of groups.
    path = tmp_path / "plan.db"
    Store(f"sqlite:///{path}").close()
    query = steps_query(1).compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
    with closing(sqlite3.connect(path)) as conn:
        plan = " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    assert "USING COVERING INDEX ix_episodes_run_train_step_metrics (run_id=?" in plan, plan
    assert "TEMP B-TREE" not in plan


def test_a_training_runs_questions_are_counted_from_its_index_alone(tmp_path: Path) -> None:
    # The Training page counts each question's episodes and steps: from the training index,
    # not from every episode's row (grouped by the column, SQLite read those in its order).
    path = tmp_path / "plan.db"
    Store(f"sqlite:///{path}").close()
    query = questions_query(1, 5000).compile(
        dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}
    )
    with closing(sqlite3.connect(path)) as conn:
        plan = " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    assert "USING COVERING INDEX ix_episodes_run_train_step_metrics (run_id=?" in plan, plan


def test_a_training_runs_questions_have_their_counts_steps_and_text(store: Store) -> None:
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=6)
    sink = store.sink(run_id)
    play_group(sink, "q1", range(2), [1.0, 0.0], (0, 0))
    play_group(sink, "q2", range(2), [0.0, 0.0], (0, 1))
    play_group(sink, "q1", range(2, 4), [1.0, 1.0], (3, 2))
    found = training_questions(store, run_id)
    assert [(q.question_id, q.episodes, q.correct, q.first_step, q.last_step) for q in found] == [
        ("q1", 4, 3, 0, 3),
        ("q2", 2, 0, 0, 0),
    ]
    assert [q.question for q in found] == [start("q1", 0).question, start("q2", 0).question]
