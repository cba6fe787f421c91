"""The step player: every producer's steps and episodes come out of `LiveEpisode` alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset, load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.episode import LiveEpisode, failed_record, start_record
from rollout_core.policies.base import Completion
from rollout_core.records import TokenTrace
from tests.support.benchmark import make_benchmark


@pytest.fixture()
def env(tmp_path: Path) -> SQLEnvironment:
    questions, db_dir = make_benchmark(tmp_path)
    dataset: Dataset = load_dataset(questions, db_dir)
    with SQLEnvironment(dataset=dataset, step_budget=3) as environment:
        yield environment  # type: ignore[misc]


def _episode(env: SQLEnvironment, **kw: object) -> LiveEpisode:
    question = env.dataset.by_id("q-count")
    return LiveEpisode(env, start_record(question, 0, 7, train_step=3, group_index=1), **kw)  # type: ignore[arg-type]


def test_a_step_records_what_the_model_saw_wrote_and_got(env: SQLEnvironment) -> None:
    episode = _episode(env)
    assert episode.start.train_step == 3 and episode.start.group_index == 1
    first = episode.play(Completion("DESCRIBE singer", tokens_out=4), policy_seconds=0.5)
    assert [m["role"] for m in first.prompt] == ["system", "user"]
    assert (first.step_no, first.action, first.argument, first.parsed) == (
        1,
        "DESCRIBE",
        "singer",
        True,
    )
    assert first.observation.startswith("table singer") and first.error is None
    assert first.policy_seconds == 0.5 and first.tokens_out == 4
    second = episode.play("QUERY SELECT nope FROM singer")
    # The next prompt is the last one plus the output and the observation, as the model reads.
    assert list(second.prompt) == [
        *first.prompt,
        {"role": "assistant", "content": "DESCRIBE singer"},
        {"role": "user", "content": first.observation},
    ]
    assert second.error is not None and second.observation == f"Error: {second.error}"
    third = episode.play("the answer is five")  # no action line: falls back to QUERY
    assert (third.action, third.parsed, third.done) == ("QUERY", False, True)
    assert episode.done
    record = episode.finish()
    assert (record.outcome, record.steps, record.failure_class) == (
        "budget_exhausted",
        3,
        "sql_errors",
    )
    assert record.tokens_out == 4 and record.mean_logprob is None


def test_an_action_given_directly_is_played_as_given(env: SQLEnvironment) -> None:
    episode = _episode(env, conversation=False)
    step = episode.play("answer(5)", action=SQLAction("ANSWER", "5"))
    assert (step.action, step.argument, step.raw_output, step.prompt) == (
        "ANSWER",
        "5",
        "answer(5)",
        (),
    )
    assert episode.finish().failure_class == "correct"


def test_an_episode_left_open_ends_without_an_answer(env: SQLEnvironment) -> None:
    episode = _episode(env)
    episode.play("SAMPLE singer")
    record = episode.finish()
    assert (record.outcome, record.steps, record.answer) == ("budget_exhausted", 1, None)
    ended = _episode(env).finish(error="replay diverged")
    assert (ended.outcome, ended.error, ended.failure_class) == (
        "error",
        "replay diverged",
        "env_error",
    )


def test_token_statistics_add_up_over_the_episode(env: SQLEnvironment) -> None:
    episode = _episode(env)
    trace = TokenTrace(text=("DESCRIBE", " singer"), logprobs=(-1.0, -2.0))
    episode.play(Completion("DESCRIBE singer", tokens=trace))
    episode.play(
        Completion(
            "SAMPLE singer",
            tokens=dataclasses.replace(trace, text=("SAMPLE", " singer"), logprobs=(-3.0, -2.0)),
        )
    )
    record = episode.finish()
    assert record.tokens_out == 4 and record.mean_logprob == pytest.approx(-2.0)


def test_a_recorded_step_keeps_the_sources_prompt_and_text(env: SQLEnvironment) -> None:
    source = _episode(env)
    recorded = source.play("DESCRIBE singer")
    fork = _episode(env)
    again = fork.play(
        recorded.raw_output, action=SQLAction("DESCRIBE", "singer"), recorded=recorded
    )
    assert again.replayed and again.prompt == recorded.prompt
    assert again.observation == recorded.observation


def test_a_reset_failure_is_an_error_episode(env: SQLEnvironment) -> None:
    start = start_record(env.dataset.by_id("q-count"), 0, 1)
    record = failed_record(start, "OperationalError: no such table")
    assert (record.outcome, record.steps, record.failure_class) == ("error", 0, "env_error")
