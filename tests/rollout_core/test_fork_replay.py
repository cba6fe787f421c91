"""Forks in the runner: a recorded prefix replays exactly, then the new policy plays on."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from rollout_core.datasets import Dataset, load_dataset
from rollout_core.episode import observations_match
from rollout_core.fork_replay import ForkStart
from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.policies.registry import make_policy
from rollout_core.records import (
    EpisodeKey,
    ListSink,
    PolicyInfo,
    StepRecord,
)
from rollout_core.runner import EpisodeTask, episode_seed, plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from tests.support.benchmark import make_benchmark

ENV = EnvironmentSettings(step_budget=6)


@pytest.fixture()
def dataset(tmp_path: Path) -> Dataset:
    questions, db_dir = make_benchmark(tmp_path)
    return load_dataset(questions, db_dir)


def _play(dataset: Dataset, policy: str, tasks: Sequence[EpisodeTask]) -> ListSink:
    sink = ListSink()
    run_episodes(dataset, tasks, make_policy(policy), sink, batch_size=4, environment=ENV)
    return sink


def _episodes(sink: ListSink) -> dict[EpisodeKey, list[StepRecord]]:
    by_key: dict[EpisodeKey, list[StepRecord]] = {}
    for s in sink.steps:
        by_key.setdefault(s.key, []).append(s)
    return {k: sorted(v, key=lambda s: s.step_no) for k, v in by_key.items()}


def _fork_tasks(dataset: Dataset, source: ListSink, step: int, seed: int = 0) -> list[EpisodeTask]:
    """Every recorded episode with at least `step` steps, forked at `step`."""
    tasks = []
    for n, (key, steps) in enumerate(sorted(_episodes(source).items())):
        if len(steps) < step:
            continue
        start = ForkStart(
            source_episode=n,
            steps=tuple(steps[: step - 1]),
            prompt=steps[step - 1].prompt,
        )
        question = dataset.by_id(key.question_id)
        seed_of = episode_seed(seed, key.question_id, key.sample_index)
        tasks.append(EpisodeTask(question, key.sample_index, seed_of, fork=start))
    return tasks


def test_a_fork_with_the_same_policy_and_seed_reproduces_the_source(dataset: Dataset) -> None:
    """The replayed steps re-execute to the recorded observations and rewards; the random
    policy, seeded per episode and step, then continues exactly as the source did."""
    source = _play(dataset, "random", plan_episodes(dataset.questions, 2, run_seed=0))
    tasks = _fork_tasks(dataset, source, step=3)
    assert tasks, "the random source should have episodes of 3 steps or more"
    fork = _play(dataset, "random", tasks)
    original, forked = _episodes(source), _episodes(fork)
    for key, steps in forked.items():
        mine = original[key]
        assert [s.raw_output for s in steps] == [s.raw_output for s in mine]
        assert [s.observation for s in steps] == [s.observation for s in mine]
        assert [s.reward for s in steps] == pytest.approx([s.reward for s in mine])
        assert [s.replayed for s in steps] == [s.step_no < 3 for s in steps]
        assert all(s.prompt == m.prompt for s, m in zip(steps, mine, strict=True))
    outcomes = {e.key: e for e in source.episodes}
    for e in fork.episodes:
        assert (e.outcome, e.steps) == (outcomes[e.key].outcome, outcomes[e.key].steps)
        assert e.reward == pytest.approx(outcomes[e.key].reward)
    starts = {s.key: s for s in fork.started}
    assert {s.fork_step for s in starts.values()} == {3}
    assert all(s.forked_from is not None for s in starts.values())


def test_a_replayed_step_is_cut_where_its_source_was(dataset: Dataset) -> None:
    """A replayed step's output is its source's text, so it holds the source's flag: cut,
    not cut, or not known (a source step from an import or a trainer's tool call)."""
    source = _play(dataset, "oracle", plan_episodes(dataset.questions, 1, run_seed=0))
    tasks = _fork_tasks(dataset, source, step=3)
    assert tasks, "the oracle should have episodes of 3 steps or more"
    told = (True, None)

    def flagged(task: EpisodeTask) -> EpisodeTask:
        assert task.fork is not None
        steps = [replace(s, truncated=f) for s, f in zip(task.fork.steps, told, strict=True)]
        return replace(task, fork=replace(task.fork, steps=tuple(steps)))

    fork = _play(dataset, "oracle", [flagged(t) for t in tasks])
    for steps in _episodes(fork).values():
        assert [(s.replayed, s.truncated) for s in steps[:2]] == [(True, True), (True, None)]
        assert all(s.truncated is False for s in steps[2:])  # the oracle's own: never cut


def test_the_oracle_takes_over_at_the_fork_step(dataset: Dataset) -> None:
    source = _play(dataset, "random", plan_episodes(dataset.questions, 1, run_seed=1))
    tasks = _fork_tasks(dataset, source, step=2)
    fork = _play(dataset, "oracle", tasks)
    assert {e.outcome for e in fork.episodes} == {"correct"}
    for key, steps in _episodes(fork).items():
        first = _episodes(source)[key][0]
        assert steps[0].replayed and steps[0].raw_output == first.raw_output
        # The oracle's plan from step 2: QUERY the gold SQL, then ANSWER.
        assert [s.action for s in steps[1:]] == ["QUERY", "ANSWER"]
        assert not any(s.replayed for s in steps[1:])


class _Recorder:
    """A policy that remembers what it was asked and answers like the oracle."""

    name = "recorder"
    tokenizer = None

    def __init__(self) -> None:
        self.inner = make_policy("oracle")
        self.requests: list[PolicyRequest] = []

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name=self.name)

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        pass

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        self.requests.extend(requests)
        return list(self.inner.generate(requests))


def test_the_new_policy_sees_the_recorded_conversation(dataset: Dataset) -> None:
    source = _play(dataset, "random", plan_episodes(dataset.questions, 1, run_seed=2))
    tasks = _fork_tasks(dataset, source, step=4)
    recorder = _Recorder()
    run_episodes(dataset, tasks, recorder, ListSink(), batch_size=2, environment=ENV)
    firsts = {r.episode: r for r in recorder.requests if r.step_no == 4}
    assert set(firsts) == {t.key for t in tasks}
    for key, request in firsts.items():
        recorded = _episodes(source)[key][3].prompt
        assert request.messages == list(recorded)
        assert request.steps_left == ENV.step_budget - 3


def test_a_changed_database_stops_the_replay_with_an_error(dataset: Dataset) -> None:
    """The fork never continues from a state its source did not see."""
    source = _play(dataset, "oracle", plan_episodes(dataset.questions, 1, run_seed=0))
    tasks = [t for t in _fork_tasks(dataset, source, step=3) if t.question.id == "q-count"]
    db = dataset.db_path("concerts")
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM concert WHERE singer_id = 5")
        conn.execute("DELETE FROM singer WHERE singer_id = 5")
    fork = _play(dataset, "oracle", tasks)
    (episode,) = fork.episodes
    assert episode.outcome == "error"
    assert episode.error is not None and "replayed step" in episode.error
    assert "changed since the source run" in episode.error
    steps = _episodes(fork)[episode.key]
    assert all(s.replayed for s in steps) and steps[-1].done
    assert len(steps) == episode.steps <= 2
    recorded = _episodes(source)[episode.key]
    assert steps[-1].observation != recorded[len(steps) - 1].observation


def test_a_fork_at_step_one_replays_nothing(dataset: Dataset) -> None:
    source = _play(dataset, "random", plan_episodes(dataset.questions[:2], 1, run_seed=0))
    fork = _play(dataset, "oracle", _fork_tasks(dataset, source, step=1))
    assert not any(s.replayed for s in fork.steps)
    assert {s.fork_step for s in fork.started} == {1}
    assert {e.outcome for e in fork.episodes} == {"correct"}


@pytest.mark.parametrize(
    ("recorded", "replayed", "match"),
    [
        ("rows", "rows", True),
        ("rows", "other rows", False),
        ("a b c\n... (cut at 3 tokens)", "a b c d e f", True),
        ("a b c d e f", "a b\n... (cut at 2 tokens)", True),
        ("a b c\n... (cut at 3 tokens)", "a b\n... (cut at 2 tokens)", True),
        ("a b c\n... (cut at 3 tokens)", "a x c d", False),
        ("caf\ufffd\n... (cut at 3 tokens)", "café au lait", True),
    ],
)
def test_observations_match_up_to_a_token_cut(recorded: str, replayed: str, match: bool) -> None:
    assert observations_match(recorded, replayed) is match


def test_the_hf_policy_plays_a_fork_through_generate(
    dataset: Dataset, tiny_checkpoint: Path
) -> None:
    """A real transformers checkpoint takes over a random run's episode at step 2."""
    source = _play(dataset, "random", plan_episodes(dataset.questions[:3], 1, run_seed=0))
    tasks = _fork_tasks(dataset, source, step=2)
    policy = make_policy(
        f"hf:{tiny_checkpoint}", GenerationSettings(max_new_tokens=8, device="cpu", threads=1)
    )
    sink = ListSink()
    run_episodes(dataset, tasks, policy, sink, batch_size=3, environment=ENV)
    assert len(sink.episodes) == len(tasks)
    for steps in _episodes(sink).values():
        assert steps[0].replayed and steps[0].tokens is None
        assert steps[1].step_no == 2 and not steps[1].replayed
        assert all(s.tokens is not None and s.tokens_out for s in steps[1:])
