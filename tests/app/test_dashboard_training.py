"""The Training page on a real store holding a training run of three steps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.dashboard import training_curves
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.records import EpisodeKey, IterationBatch, TokenTrace
from rollout_core.settings import TrainingSettings
from storage.store import Store
from storage.training import GroupTag, TrainingSink, TrainingStep
from tests.app.dashboard.apptest import open_page, texts
from tests.storage.store_builders import finish, spec, start, step


@dataclasses.dataclass(frozen=True)
class TrainingStore:
    url: str
    run_id: int
    batch_run: int


def _play(sink: TrainingSink, q: str, sample: int, actions: list[str], correct: bool) -> None:
    sink.write(IterationBatch(started=[start(q, sample)]))
    steps = []
    for n, action in enumerate(actions, 1):
        s = step(q, sample, n, action=action, done=n == len(actions))  # type: ignore[arg-type]
        trace = TokenTrace(text=("a", "b"), logprobs=(-0.5, -1.5))
        steps.append(dataclasses.replace(s, tokens=trace))
    reward = 1.0 if correct else 0.0
    outcome = "correct" if correct else "wrong"
    sink.write(
        IterationBatch(steps=steps, finished=[finish(q, sample, outcome, reward, len(actions))])
    )


@pytest.fixture(scope="module")
def training_store(tmp_path_factory: pytest.TempPathFactory) -> TrainingStore:
    path = tmp_path_factory.mktemp("training") / "store.db"
    store = Store(str(path))
    settings = TrainingSettings(model="tiny", learning_rate=0.05, num_generations=2)
    run_id = store.create_run(
        spec("grpo-demo", kind="training", training=settings), episodes_planned=12
    )
    tags = {}
    plays = []
    for step_no in range(3):
        for g, q in enumerate(("q1", "q2")):
            for k in range(2):
                sample = 2 * step_no + k
                tags[EpisodeKey(q, sample)] = GroupTag(step_no, 2 * step_no + g)
                # q1 learns: wrong at step 0, half right at 1, right at 2; it takes the same
                # first action throughout and answers at step 2 only once trained.
                right = q == "q1" and (step_no == 2 or (step_no == 1 and k == 0))
                actions = ["DESCRIBE", "ANSWER"] if right else ["DESCRIBE", "QUERY"]
                plays.append((q, sample, actions, right))
    sink = TrainingSink(store, run_id, tags)
    for play in plays:
        _play(sink, *play)
    store.set_run_status(run_id, "completed")
    batch_run = store.create_run(spec("batch"), episodes_planned=1)
    store.close()
    return TrainingStore(str(path), run_id, batch_run)


@pytest.fixture
def env(training_store: TrainingStore, monkeypatch: pytest.MonkeyPatch) -> TrainingStore:
    monkeypatch.setenv(ENV_STORE, training_store.url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return training_store


def test_curves_over_training_steps_and_the_trainers_settings(env: TrainingStore) -> None:
    at = open_page("views/training.py", run=str(env.run_id))
    assert at.selectbox[0].value == env.run_id
    assert at.selectbox[0].options == [f"grpo-demo (#{env.run_id})"]  # batch runs are not listed
    charts = at.get("plotly_chart")
    assert len(charts) == len(training_curves.CURVES)
    shown = texts(at).replace("\\", "")  # markdown escapes
    assert "learning rate 0.05" in shown and "2 episodes per group" in shown
    assert "completed" in shown and "12" in shown


def test_one_question_at_its_first_middle_and_last_steps(env: TrainingStore) -> None:
    at = open_page("views/training.py", run=str(env.run_id), question="q1")
    shown = texts(at).replace("\\", "")  # markdown escapes
    for n in range(3):
        assert f"Training step {n}" in shown
    assert "group 2/2 correct" in shown
    assert "First divergence at action 2." in [w.value for w in at.warning]
    links = [e.proto for e in at.get("page_link")]
    assert len(links) == 3 and all("replay" in link.page for link in links)
    assert all(link.query_string.startswith("episode=") for link in links)


def test_an_unknown_run_or_question_is_said_and_the_first_shown(env: TrainingStore) -> None:
    at = open_page("views/training.py", run=str(env.batch_run), question="nope")
    warnings = [w.value for w in at.warning]
    assert f"run='{env.batch_run}' in the link is not a training run" in warnings[0]
    assert any(
        "question='nope' in the link is not a question played in this run" in w for w in warnings
    )


def test_no_training_runs_says_how_to_record_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "empty.db")
    Store(url).close()
    monkeypatch.setenv(ENV_STORE, url)
    at = open_page("views/training.py")
    assert "No training runs yet" in at.info[0].value


def test_shown_steps_are_first_middle_last() -> None:
    assert training_curves.shown_steps([0, 3, 5, 9, 12]) == [0, 5, 12]
    assert training_curves.shown_steps([4, 7]) == [4, 7]
    assert training_curves.shown_steps([]) == []


def _step(n: int, *, episodes: int, accuracy: float, logprob: float | None) -> TrainingStep:
    return TrainingStep(
        train_step=n, episodes=episodes, groups=episodes // 2, accuracy=accuracy, reward=accuracy,
        reward_std=0.5, group_reward_std=0.1 * n, frac_reward_zero_std=1.0 if n % 2 else 0.0,
        unparsed_rate=None, mean_steps=2.0, mean_logprob=logprob, mean_tokens=10.0,
    )  # fmt: skip


def test_a_long_run_is_drawn_as_means_of_consecutive_steps() -> None:
    # 2,500 steps, at most 1,000 points: runs of 3 steps, each averaged into one point at
    # its last step, weighted by episodes (by groups for the group metrics).
    steps = [
        _step(n, episodes=2 + 2 * (n % 3), accuracy=float(n % 3 == 2), logprob=-1.0)
        if n % 3 == 0
        else _step(n, episodes=2 + 2 * (n % 3), accuracy=float(n % 3 == 2), logprob=None)
        for n in range(2500)
    ]
    curves = training_curves.curves_of(steps, max_points=1000)
    assert (curves.steps, curves.per_point, len(curves.points)) == (2500, 3, 834)
    assert curves.last == steps[-1]
    first = curves.points[0]  # steps 0, 1, 2 with 2, 4 and 6 episodes
    assert (first.train_step, first.episodes, first.groups) == (2, 12, 6)
    assert first.accuracy == 6 / 12  # only step 2 is right: its 6 episodes of 12
    assert first.frac_reward_zero_std == 2 / 6  # step 1's 2 groups of 6
    assert first.group_reward_std == (0.0 * 1 + 0.1 * 2 + 0.2 * 3) / 6
    assert first.mean_logprob == -1.0  # step 0 alone has one
    assert first.unparsed_rate is None  # no step has one
    assert curves.firsts[:3] == [0, 3, 6]
    assert (curves.points[-1].train_step, curves.firsts[-1]) == (2499, 2499)  # a run of one
    [trace, *_] = training_curves.curve(curves, "t", [("accuracy", "accuracy")]).data
    assert len(trace.x) == 834 and trace.mode == "lines"
    assert "steps %{customdata}-%{x} (mean)" in trace.hovertemplate


def test_a_short_run_is_drawn_step_by_step() -> None:
    steps = [_step(n, episodes=4, accuracy=0.5, logprob=-1.0) for n in range(12)]
    curves = training_curves.curves_of(steps)
    assert curves.per_point == 1 and curves.points == steps
    [trace] = training_curves.curve(curves, "t", [("accuracy", "accuracy")]).data
    assert trace.mode == "lines+markers" and trace.hovertemplate is None
