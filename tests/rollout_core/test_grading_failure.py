"""A grader failure is never a wrong answer: the step says so and the episode ends in `error`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rollout_core import grading, rewards, runner
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset, load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.grading import GRADING_FAILED
from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.policies.registry import make_policy
from rollout_core.records import EpisodeKey, ListSink, PolicyInfo
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.sandbox import Sandbox, SandboxLimits
from rollout_core.settings import EnvironmentSettings
from tests.support.benchmark import make_benchmark

FAILURE = "grading failed: ZeroDivisionError: the grader broke"


@pytest.fixture()
def dataset(tmp_path: Path) -> Dataset:
    questions, db_dir = make_benchmark(tmp_path)
    return load_dataset(questions, db_dir)


@pytest.fixture()
def broken_grader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grader's first step raises, as a bug in it would (for empty golds too)."""

    def broken(*args: object) -> str:
        raise ZeroDivisionError("the grader broke")

    monkeypatch.setattr(grading, "_strip_fences", broken)


@pytest.fixture()
def env(dataset: Dataset) -> Iterator[SQLEnvironment]:
    with SQLEnvironment(dataset=dataset, step_budget=4) as environment:
        yield environment


@pytest.mark.usefixtures("broken_grader")
def test_the_answer_step_carries_the_failure(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    env.step(SQLAction("DESCRIBE", "singer"))
    obs = env.step(SQLAction("ANSWER", "5"))
    assert obs.done and obs.error == FAILURE
    assert obs.reward == 0.0  # no answer reward, and no penalty: it is not the agent's error
    state = env.state
    assert state.outcome == "error" and state.error == FAILURE
    assert state.answer == "5" and state.answer_correct is None
    assert state.total_reward == 0.0


def test_a_working_grader_leaves_no_error(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("ANSWER", "4"))
    assert obs.error is None and env.state.error is None and env.state.outcome == "wrong"


@pytest.mark.usefixtures("broken_grader")
def test_the_runs_records_count_the_failures(dataset: Dataset) -> None:
    sink = ListSink()
    tasks = plan_episodes(dataset.questions, samples=2, run_seed=0)
    stats = run_episodes(dataset, tasks, make_policy("oracle"), sink, batch_size=4)
    assert stats.episodes == len(tasks) and stats.correct == 0
    assert [e.outcome for e in sink.episodes] == ["error"] * len(tasks)
    assert all(e.error == FAILURE and e.answer is not None for e in sink.episodes)
    answers = [s for s in sink.steps if s.action == "ANSWER"]
    assert len(answers) == len(tasks)
    assert all(s.error == FAILURE and s.reward == 0.0 and s.done for s in answers)
    assert all(s.observation == f"Error: {FAILURE}" for s in answers)
    failed = sum(
        e.outcome == "error" and (e.error or "").startswith(f"{GRADING_FAILED}:")
        for e in sink.episodes
    )
    assert failed == len(tasks)


def test_the_runner_applies_the_environment_settings(dataset: Dataset) -> None:
    settings = EnvironmentSettings(step_budget=2, sandbox=SandboxLimits(max_cell_chars=1))
    sink = ListSink()
    tasks = plan_episodes([q for q in dataset.questions if q.id == "q-france"], 1, 0)
    with pytest.raises(ValueError, match="not both"):
        run_episodes(
            dataset, tasks, make_policy("oracle"), sink, step_budget=9, environment=settings
        )
    run_episodes(dataset, tasks, make_policy("oracle"), sink, environment=settings)
    # Budget 2: the oracle skips DESCRIBE; the QUERY's cells are cut at 1 character.
    assert [s.action for s in sink.steps] == ["QUERY", "ANSWER"]
    assert sink.steps[0].observation.splitlines()[1:] == ["A...", "C..."]
    assert sink.episodes[0].outcome == "correct"


class _Failing:
    """Fails on its second call, after the environments have opened connections."""

    name = "failing"
    tokenizer = None

    def __init__(self) -> None:
        self.inner, self.calls = make_policy("oracle"), 0

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name=self.name)

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        pass

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("policy crashed")
        return list(self.inner.generate(requests))


def test_the_runners_sandbox_is_closed_also_on_errors(
    dataset: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Sandbox] = []

    class Kept(Sandbox):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(runner, "Sandbox", Kept)
    tasks = plan_episodes(dataset.questions, samples=1, run_seed=0)
    run_episodes(dataset, tasks, make_policy("oracle"), ListSink(), batch_size=4)
    with pytest.raises(RuntimeError, match="policy crashed"):
        run_episodes(dataset, tasks, _Failing(), ListSink(), batch_size=4)
    assert len(made) == 2  # one sandbox per run, shared by its four slots
    db = dataset.db_path("concerts")
    for sandbox in made:
        with pytest.raises(RuntimeError, match="sandbox is closed"), sandbox.connection(db):
            pass


def test_error_penalty_still_applies_to_the_agents_errors(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("SAMPLE", "nowhere"))
    assert obs.reward == pytest.approx(rewards.ERROR_PENALTY) and env.state.error is None
