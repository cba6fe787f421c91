"""Failure classes: every class, the order of precedence, and the runner classifying episodes
it plays through the real environment."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from rollout_core.datasets import Dataset, load_dataset
from rollout_core.failure_classes import (
    StepFacts,
    action_key,
    classify_episode,
    gold_seen_from_progress,
    needs_steps,
)
from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.records import FAILURE_CLASSES, EpisodeKey, ListSink, PolicyInfo, Question
from rollout_core.rewards import PROGRESS_SCALE, progress_reward
from rollout_core.runner import plan_episodes, run_episodes
from tests.support.benchmark import make_benchmark


def q(sql: str, error: str | None = None, parsed: bool = True) -> StepFacts:
    return StepFacts("QUERY", sql, parsed, error)


def d(table: str) -> StepFacts:
    return StepFacts("DESCRIBE", table, True, None)


RAW = StepFacts("QUERY", "I am not sure", False, "near 'I': syntax error")
ERR = "no such column: nme"


# -- the rules one by one ------------------------------------------------------------------------


def test_answered_episodes_are_classed_by_their_answer_whatever_their_steps() -> None:
    messy = [RAW, RAW, RAW, q("SELECT nme", ERR)]
    assert classify_episode("correct", messy, gold_seen=False) == "correct"
    assert classify_episode("wrong", messy, gold_seen=True) == "wrong_after_gold"
    assert classify_episode("wrong", messy, gold_seen=False) == "wrong_answer"


def test_an_environment_error_wins_over_everything() -> None:
    assert classify_episode("error", [RAW, RAW], gold_seen=True) == "env_error"
    assert classify_episode("error", (), gold_seen=False) == "env_error"


def test_half_the_steps_unparsed_is_unparsed_output() -> None:
    steps = [RAW, d("singer"), RAW, q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "unparsed"
    # one in four is not enough: that episode was stuck elsewhere
    steps = [RAW, d("singer"), q("SELECT 2"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "budget_exhausted"


def test_repeating_half_the_steps_is_a_loop_and_case_and_spacing_do_not_hide_it() -> None:
    steps = [d("singer"), d("SINGER "), d("  singer"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "action_loop"
    # a single repeat in two steps is not a loop
    assert classify_episode("budget_exhausted", [d("a"), d("a")], gold_seen=False) == (
        "budget_exhausted"
    )


def test_half_the_steps_failing_queries_is_stuck_on_sql_errors() -> None:
    steps = [q("SELECT nme", ERR), q("SELECT nam", ERR), d("singer"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "sql_errors"
    # a failed DESCRIBE (unknown table) is not an SQL error
    steps = [StepFacts("DESCRIBE", "x", True, "no table x"), d("y"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "budget_exhausted"


def test_no_answer_without_a_dominant_failure_is_budget_exhausted() -> None:
    steps = [d("singer"), q("SELECT 1"), q("SELECT 2"), q("SELECT 3", ERR)]
    assert classify_episode("budget_exhausted", steps, gold_seen=True) == "budget_exhausted"
    assert classify_episode("budget_exhausted", (), gold_seen=False) == "budget_exhausted"


# -- precedence ----------------------------------------------------------------------------------


def test_unparsed_comes_before_loop_and_sql_errors() -> None:
    # the same unparsed text four times: a loop of failing queries, but unparsed first
    assert classify_episode("budget_exhausted", [RAW] * 4, gold_seen=False) == "unparsed"


def test_a_loop_of_failing_queries_is_a_loop() -> None:
    steps = [q("SELECT nme", ERR)] * 4
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "action_loop"


def test_every_class_is_reachable_and_listed_once() -> None:
    reached = {
        classify_episode("abandoned", [d("a")], gold_seen=False),
        classify_episode("error", (), gold_seen=False),
        classify_episode("correct", (), gold_seen=False),
        classify_episode("wrong", (), gold_seen=True),
        classify_episode("wrong", (), gold_seen=False),
        classify_episode("budget_exhausted", [RAW], gold_seen=False),
        classify_episode("budget_exhausted", [d("a")] * 3, gold_seen=False),
        classify_episode("budget_exhausted", [q("x", ERR)], gold_seen=False),
        classify_episode("budget_exhausted", [d("a")], gold_seen=False),
    }
    assert reached == set(FAILURE_CLASSES) and len(FAILURE_CLASSES) == 9


def test_steps_are_read_only_for_episodes_without_an_answer() -> None:
    assert [o for o in ("correct", "wrong", "error", "budget_exhausted") if needs_steps(o)] == [
        "budget_exhausted"
    ]


def test_gold_seen_from_the_stored_progress_matches_the_best_overlap() -> None:
    # progress rewards telescope: overlaps 0.4, 0.75, 1.0 pay 0.1 x the final best in all
    best, progress = 0.0, 0.0
    for overlap in (0.4, 0.75, 0.5, 1.0):
        progress += progress_reward(overlap, best)
        best = max(best, overlap)
    assert gold_seen_from_progress(progress)
    assert not gold_seen_from_progress(PROGRESS_SCALE * 0.9995)  # 999 of 1000 rows
    assert not gold_seen_from_progress(None) and not gold_seen_from_progress(0.0)


def test_an_imported_turn_that_took_no_action_repeats_none() -> None:
    prose = StepFacts(None, None, False, None)  # an imported turn without SQL
    # Two repeats of DESCRIBE in six steps: not half of them, whatever the prose says twice.
    steps = [prose, prose, d("a"), d("a"), d("a"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "budget_exhausted"
    # The same text run twice as a QUERY here is a repeated action, and makes it a loop.
    steps = [RAW, RAW, d("a"), d("a"), d("a"), q("SELECT 1")]
    assert classify_episode("budget_exhausted", steps, gold_seen=False) == "action_loop"


def test_action_key_ignores_case_and_spacing_of_the_argument_only() -> None:
    assert action_key("QUERY", " SELECT  1\n") == action_key("QUERY", "select 1")
    assert action_key("QUERY", "x") != action_key("DESCRIBE", "x")


# -- the runner classifies what it plays ---------------------------------------------------------


class Scripted:
    """A policy that writes the same given outputs in every episode, step by step."""

    name = "scripted-test"
    tokenizer = None

    def __init__(self, outputs: Sequence[str]) -> None:
        self.outputs = list(outputs)

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name=self.name)

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        pass

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        out = []
        for r in requests:
            text = self.outputs[min(r.step_no, len(self.outputs)) - 1]
            out.append(Completion(text=text.replace("{gold}", r.question.gold_sql)))
        return out


@pytest.fixture()
def dataset(tmp_path: Path) -> Dataset:
    questions, db_dir = make_benchmark(tmp_path)
    return load_dataset(questions, db_dir)


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (["QUERY {gold}", "ANSWER: no idea at all"], "wrong_after_gold"),
        (["QUERY SELECT 1 FROM singer WHERE 0", "ANSWER: no idea at all"], "wrong_answer"),
        (["I would like to think about it"], "unparsed"),
        (["DESCRIBE singer"], "action_loop"),
        (["QUERY SELECT nme FROM singer", "QUERY SELECT nam FROM singer", "SAMPLE singer",
          "QUERY SELECT agee FROM singer"], "sql_errors"),
        (["DESCRIBE singer", "SAMPLE singer", "DESCRIBE concert", "SAMPLE concert"],
         "budget_exhausted"),
    ],
)  # fmt: skip
def test_the_runner_classifies_each_episode_as_it_finishes(
    dataset: Dataset, outputs: list[str], expected: str
) -> None:
    sink = ListSink()
    # q-count's gold is one row, `SELECT COUNT(*)`; q-empty's gold is no rows at all
    questions = [x for x in dataset.questions if x.id in ("q-count", "q-france")]
    tasks = plan_episodes(questions, samples=1, run_seed=0)
    run_episodes(dataset, tasks, Scripted(outputs), sink, step_budget=4)
    assert [e.failure_class for e in sink.episodes] == [expected, expected]


def test_the_oracle_is_correct_and_a_broken_gold_query_is_an_environment_error(
    dataset: Dataset,
) -> None:
    from rollout_core.policies.registry import make_policy

    sink = ListSink()
    run_episodes(dataset, plan_episodes(dataset.questions[:2], 1, 0), make_policy("oracle"), sink)
    assert {e.failure_class for e in sink.episodes} == {"correct"}

    broken = Question(
        id="q-broken", db_id="concerts", question="?", gold_sql="SELECT nope FROM nowhere"
    )
    with_broken = dataclasses.replace(dataset, questions=(*dataset.questions, broken))
    sink = ListSink()
    run_episodes(with_broken, plan_episodes([broken], 1, 0), make_policy("oracle"), sink)
    assert [(e.outcome, e.failure_class) for e in sink.episodes] == [("error", "env_error")]
    assert "gold query of question 'q-broken' failed" in str(sink.episodes[0].error)
