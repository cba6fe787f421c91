"""Forks refuse episodes rollscope did not play (imported or recorded by a loop of its own) up
front, naming why, and create no run: their steps were played in another environment, whose
observations a replay in rollscope's would not give back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.forks import (
    ForkError,
    ForkRequest,
    _plan,
    fork_tasks,
    not_forkable,
    plan_episode_fork,
    plan_failure_forks,
    queue_episode_fork,
)
from app.recorder import Recorder
from rollout_core.records import ForkPoint
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.cli import in_process

WRONG = sql_response([("<sql>SELECT 1</sql>", "\n1\n"), ("<solution>SELECT 2</solution>", None)])
WHY = "another framework's environment; rollscope can only replay steps it played"


@pytest.fixture
def imported(tmp_path: Path) -> Iterator[tuple[Store, int, int]]:
    """A verl import on the demo questions (one wrong episode of two steps), as the audit's
    `--questions demo` import: the store, the run and the episode."""
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    prompt = sql_prompt("How many books does the library have?")
    verl_dump(tmp_path / "dump", 1, [prompt], [WRONG], ["SELECT 1"], [0.0], {})
    run_id, _ = run_import(store, tmp_path / "dump", "verl-grpo", questions="demo")
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    assert episode.outcome == "wrong" and episode.steps == 2
    yield store, run_id, episode.id
    store.close()


def test_an_imported_episode_is_refused_up_front(imported: tuple[Store, int, int]) -> None:
    store, _, episode = imported
    with pytest.raises(ForkError) as refused:
        plan_episode_fork(store, episode, 2, ForkRequest(policy="oracle"))
    message = str(refused.value)
    assert message.startswith(f"episode {episode} cannot be forked: run 'verl-grpo'")
    assert "imported from verl rollout dump files" in message and WHY in message
    assert "database" not in message and "dataset" not in message  # not blamed on either
    with pytest.raises(ForkError, match="imported from verl rollout dump files"):
        queue_episode_fork(store, episode, 2, ForkRequest(policy="oracle"))
    assert [r.name for r in store.list_runs()] == ["verl-grpo"]


def test_a_fork_queued_before_the_refusal_is_refused_by_its_worker(
    imported: tuple[Store, int, int],
) -> None:
    """A fork of an imported episode an older rollscope queued fails with the reason, not
    with a replay that blames the database."""
    store, run_id, episode = imported
    run = store.get_run(run_id)
    assert run is not None
    detail = store.get_episode(episode)
    assert detail is not None
    point = ForkPoint(episode, 2, detail.summary.question_id, detail.summary.sample_index)
    # How plan_episode_fork planned it before it checked the source run.
    plan = _plan(run, "step", [point], ForkRequest(policy="oracle"), "old")
    with pytest.raises(ForkError, match=f"episode {episode} cannot be forked: .*{WHY}"):
        fork_tasks(store, plan)


def test_first_error_forks_of_an_imported_run_are_refused(imported: tuple[Store, int, int]) -> None:
    store, _, _ = imported
    with pytest.raises(ForkError, match=f"cannot fork: run 'verl-grpo' was imported .*{WHY}"):
        plan_failure_forks(store, "verl-grpo", ForkRequest(policy="oracle"))


def test_a_recorder_run_is_refused_too(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    turns = [
        {"role": "user", "content": "How many?"},
        {"role": "assistant", "content": "<solution>SELECT 2</solution>"},
    ]
    with Recorder(store, run="my-loop", kind="training") as rec:
        rec.episode(question="How many?", turns=turns, reward=0.0, step=0)
    (run,) = store.list_runs()
    assert not_forkable(run) == (
        "run 'my-loop' was recorded by a Recorder in a loop of its own, so its steps were "
        f"played in {WHY} (fork an episode of a rollscope run)"
    )
    with pytest.raises(ForkError, match="recorded by a Recorder"):
        plan_failure_forks(store, "my-loop", ForkRequest(policy="oracle"))
    store.close()


def test_rollscope_fork_says_why_in_one_line_and_creates_no_run(
    imported: tuple[Store, int, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _, episode = imported
    for args in (
        (str(episode), "--step", "2"),
        ("--run", "verl-grpo", "--at", "first-error"),
    ):
        code, err = in_process(
            monkeypatch, capsys, "fork", *args, "--policy", "oracle", "--store", store.url
        )
        assert code == 2 and "Traceback" not in err
        assert WHY in " ".join(err.split()), err
    assert [r.name for r in store.list_runs()] == ["verl-grpo"]
