"""The Training page on a real store holding a training run of three steps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from app.dashboard.training.view import spaced
from rollout_core.records import IterationBatch, Outcome, Sink, TokenTrace
from rollout_core.settings import TrainingSettings
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.long_training import LONG_STEPS, LongTraining
from tests.support.records import finish, spec, start, step


@dataclasses.dataclass(frozen=True)
class TrainingStore:
    url: str
    run_id: int
    batch_run: int


def _play(
    sink: Sink, q: str, sample: int, actions: list[str], correct: bool, at: tuple[int, int]
) -> None:
    """One episode at (training step, group index), each step two tokens."""
    started = dataclasses.replace(start(q, sample), train_step=at[0], group_index=at[1])
    sink.write(IterationBatch(started=[started]))
    steps = []
    for n, action in enumerate(actions, 1):
        s = step(q, sample, n, action=action, done=n == len(actions))  # type: ignore[arg-type]
        trace = TokenTrace(text=("a", "b"), logprobs=(-0.5, -1.5))
        steps.append(dataclasses.replace(s, tokens=trace))
    reward = 1.0 if correct else 0.0
    outcome: Outcome = "correct" if correct else "wrong"
    ended = finish(q, sample, outcome, reward, len(actions))
    ended = dataclasses.replace(ended, tokens_out=2 * len(actions), mean_logprob=-1.0)
    sink.write(IterationBatch(steps=steps, finished=[ended]))


@pytest.fixture(scope="module")
def training_store(tmp_path_factory: pytest.TempPathFactory) -> TrainingStore:
    path = tmp_path_factory.mktemp("training") / "store.db"
    store = Store(str(path))
    settings = TrainingSettings(model="tiny", learning_rate=0.05, num_generations=2)
    run_id = store.create_run(
        spec("grpo-demo", kind="training", training=settings), episodes_planned=12
    )
    plays = []
    for step_no in range(3):
        for g, q in enumerate(("q1", "q2")):
            for k in range(2):
                sample = 2 * step_no + k
                # q1 learns: wrong at step 0, half right at 1, right at 2; it takes the same
                # first action throughout and answers at step 2 only once trained.
                right = q == "q1" and (step_no == 2 or (step_no == 1 and k == 0))
                actions = ["DESCRIBE", "ANSWER"] if right else ["DESCRIBE", "QUERY"]
                plays.append((q, sample, actions, right, (step_no, 2 * step_no + g)))
    sink = store.sink(run_id)
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
    at = open_page("training/page.py", run=str(env.run_id))
    assert at.selectbox[0].value == env.run_id
    assert at.selectbox[0].options == [f"grpo-demo (#{env.run_id})"]  # batch runs are not listed
    figures = at.get("plotly_chart")
    # Accuracy, reward, reward spread, signal by source, unparsed, steps, log-prob, tokens.
    assert len(figures) == 8
    shown = texts(at).replace("\\", "")  # markdown escapes
    assert "learning rate 0.05" in shown and "2 episodes per group" in shown
    assert "completed" in shown and "12" in shown


def test_one_question_at_its_first_middle_and_last_steps(env: TrainingStore) -> None:
    at = open_page("training/page.py", run=str(env.run_id), question="q1")
    shown = texts(at).replace("\\", "")  # markdown escapes
    for n in range(3):
        assert f"Training step {n}" in shown
    assert "group 2/2 correct" in shown
    assert "First divergence at action 2." in [w.value for w in at.warning]
    # A query's result shows under it, as on Compare (the DESCRIBE's folds away).
    assert "obs 2" in [c.value for c in at.code]
    links = [e.proto for e in at.get("page_link") if e.proto.label == "Replay"]
    assert len(links) == 3 and all("replay" in link.page for link in links)
    assert all(link.query_string.startswith("episode=") for link in links)


def test_an_unknown_run_or_question_is_said_and_the_first_shown(env: TrainingStore) -> None:
    at = open_page("training/page.py", run=str(env.batch_run), question="nope")
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
    at = open_page("training/page.py")
    assert "No training runs yet" in at.info[0].value


def test_an_environment_servers_run_is_a_training_run_of_the_steps_its_clients_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trainer driving `rollscope env-server` sends its step with each reset: the run's
    # curves are its training's, as a run recorded by make_rollout_func.
    url = str(tmp_path / "env.db")
    store = Store(url)
    trained = store.create_run(spec("served-training", kind="env"), episodes_planned=None)
    for step_no in range(2):
        _play(store.sink(trained), "q1", step_no, ["ANSWER"], step_no == 1, (step_no, step_no))
    evaluated = store.create_run(spec("served-eval", kind="env"), episodes_planned=None)
    store.sink(evaluated).write(IterationBatch(started=[start("q1", 0)]))
    store.sink(evaluated).write(IterationBatch(finished=[finish("q1", 0, "wrong", 0.0, 1)]))
    store.close()
    monkeypatch.setenv(ENV_STORE, url)
    at = open_page("training/page.py", run=str(trained))
    assert at.selectbox[0].value == trained
    assert len(at.get("plotly_chart")) >= 2
    assert [m.value for m in at.metric][:3] == ["running", "2", "2"]
    at = open_page("training/page.py", run=str(evaluated))
    assert not at.warning, "an env run is a run the page takes"
    assert "its clients reset without `train_step`" in at.info[0].value
    # A link naming a question of such a run is told why none is shown.
    at = open_page("training/page.py", run=str(evaluated), question="q1")
    warnings = [w.value.replace("\\", "") for w in at.warning]
    assert warnings == [
        "question='q1' in the link: this run's episodes carry no training step, so no question "
        "is shown across training (its episodes are on Episodes)."
    ]


def _figures(at: AppTest) -> dict[str, dict[str, Any]]:
    """The page's charts by title."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def test_each_quantity_has_its_own_axis_unit_and_colour(env: TrainingStore) -> None:
    # Reward and accuracy shared one unitless axis in two near-identical blues.
    figures = _figures(open_page("training/page.py", run=str(env.run_id)))
    axes = {title: spec["layout"]["yaxis"]["title"]["text"] for title, spec in figures.items()}
    assert axes["Accuracy"] == "episodes correct"
    assert axes["Reward"] == "mean episode reward"
    assert len(set(axes.values())) == len(axes)
    assert figures["Accuracy"]["layout"]["yaxis"]["tickformat"] == ".0%"
    names = {t: [d["name"] for d in spec["data"]] for t, spec in figures.items()}
    assert names["Accuracy"] == ["accuracy", "trend (mean of 3 points)"]
    assert names["Reward"] == ["reward", "trend (mean of 3 points)"]
    spread = figures["Reward spread"]["data"]
    assert [d["name"] for d in spread] == ["across the step (reward_std)", "within groups (mean)"]
    assert spread[0]["line"]["color"] != spread[1]["line"]["color"]
    # Every quantity its own colour (a trend wears its quantity's).
    colours = [
        d.get("line", {}).get("color") or d["marker"]["color"]
        for spec in figures.values()
        for d in spec["data"]
        if d.get("type") != "bar" and not d["name"].startswith("trend")
    ]
    assert len(colours) == 8 and len(set(colours)) == 8


def test_hovers_say_the_step_and_the_questions_it_drew(env: TrainingStore) -> None:
    at = open_page("training/page.py", run=str(env.run_id))
    assert "Click a point to open its episodes" in texts(at)  # its points are marked
    figures = _figures(at)
    accuracy = figures["Accuracy"]["data"][0]
    assert accuracy["hovertemplate"].startswith("accuracy %{y:.1%}<br>%{customdata[0]}")
    step_0, step_1, _ = accuracy["customdata"]
    assert step_0 == ["step 0", 4, "<br>drew q1 0/2 correct, q2 0/2"]
    assert step_1[2] == "<br>drew q1 1/2 correct, q2 0/2"
    # A trend beside the raw points: the mean of the last three points, by episodes.
    trend = figures["Accuracy"]["data"][1]
    assert trend["y"] == pytest.approx([0.0, 0.125, 0.25])


def test_the_std_metrics_say_what_they_are(env: TrainingStore) -> None:
    at = open_page("training/page.py", run=str(env.run_id))
    shown = texts(at)
    assert "**reward_std** (as TRL logs it of the reward it trains on): the std of all" in shown
    assert "**within groups**: the mean over the step's groups of each group's own std" in shown
    assert "scaled by where the trainer trains on this reward" in shown
    signal = _figures(at)["Learning signal by source"]["data"]
    assert [d["name"] for d in signal] == ["correctness", "shaping only", "none: no advantage"]
    assert {d["type"] for d in signal} == {"bar"}
    # Step 1: q1 half right (correctness), q2 all wrong with equal rewards.
    assert [d["y"][1] for d in signal] == [0.5, 0.0, 0.5]


def test_a_step_whose_mean_reward_is_not_a_number_is_named_under_its_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rewards whose sum passes a float's range: Plotly left the step's point out without a
    # word, the trend vanished for three points, and the step's std read 0.
    store = Store(str(tmp_path / "s.db"))
    run_id = store.create_run(spec("huge", kind="training"), episodes_planned=8)
    sink = store.sink(run_id)
    rewards = [(0.0, 1.0), (1.5e308, 1e308), (1.0, 1.0), (0.0, 1.0)]
    for at, pair in enumerate(rewards):
        for k, reward in enumerate(pair):
            sample = 2 * at + k
            sink.write(
                IterationBatch(
                    started=[start("q1", sample, train_step=at, group_index=at)],
                    steps=[step("q1", sample, 1, done=True)],
                    finished=[finish("q1", sample, "wrong", reward, 1)],
                )
            )
    store.close()
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "s.db"))
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    at = open_page("training/page.py", run=str(run_id))
    captions = [c.value for c in at.caption]
    assert "Not drawn, as not a finite number: reward inf at step 1." in " ".join(captions)
    assert "Not drawn, as not a finite number: across the step (reward_std) inf at step 1;" in (
        " ".join(captions)
    )
    trend = _figures(at)["Reward"]["data"][1]
    assert trend["name"].startswith("trend") and trend["y"] == [0.5, 0.5, 0.75, 0.75]


def test_the_questions_that_flipped_are_listed_with_counts(env: TrainingStore) -> None:
    at = open_page("training/page.py", run=str(env.run_id))
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["right → wrong"], metrics["wrong → right"]) == ("0", "1")
    assert metrics["drawn at two steps or more"] == "2"
    [flips] = [df.value for df in at.dataframe if "flip" in df.value.columns]
    row = flips.iloc[0]
    assert (row["flip"], row["question id"]) == ("wrong → right", "q1")
    assert (row["first step"], row["correct at first"]) == (0, "0/2")
    assert (row["last step"], row["correct at last"]) == (2, "2/2")
    # The run's first step against its last on Compare, and every step on the Question map.
    links = {e.proto.label: e.proto for e in at.get("page_link") if "step" in e.proto.label}
    run = env.run_id
    compare = links["Compare step 0 with step 2"]
    assert "compare" in compare.page and compare.query_string == f"run={run}%400&run={run}%402"
    qmap = links["Question map of its 3 steps"]
    assert qmap.page == "map"
    assert qmap.query_string == f"run={run}%400&run={run}%401&run={run}%402"


def test_the_map_link_of_a_long_run_names_evenly_spaced_steps() -> None:
    assert spaced([1, 2, 3], 10) == [1, 2, 3]
    assert spaced(list(range(100, 200)), 4) == [100, 133, 166, 199]
    assert spaced(list(range(0, 1000, 5)), 10)[::9] == [0, 995]


def test_a_run_of_thousands_of_groups_says_what_each_step_drew_and_what_flipped(
    long_training: LongTraining,
) -> None:
    at = open_page("training/page.py", run=str(long_training.run_id))
    figures = _figures(at)
    # Its records hold no tokens: those two charts are named as not drawn instead of empty.
    assert len(figures) == 6  # the signal chart among them
    assert "Not drawn, as this run's records hold none: " in texts(at)
    # Lines alone, with no point to click: the page does not offer it.
    assert "Click it" not in texts(at)
    accuracy = figures["Accuracy"]["data"][0]
    assert len(accuracy["x"]) == LONG_STEPS // 2  # a point for two steps
    first, *_, last = accuracy["customdata"]
    assert first == [
        "steps 0-1 (mean)",
        12,
        "<br>drew q-learnt 0/4 correct, q-mixed 2/4, q-shaped 0/4",
    ]
    assert last[2] == "<br>drew q-learnt 4/4 correct, q-mixed 2/4, q-shaped 0/4"
    signal = figures["Learning signal by source"]["data"]
    # Stacked areas: hundreds of points are too many bars for a browser to draw quickly. One
    # hover for the three, which says the steps and what they drew once.
    assert {(d["type"], d["stackgroup"]) for d in signal} == {("scatter", "sources")}
    layout = figures["Learning signal by source"]["layout"]
    assert layout["hovermode"] == "x unified"
    assert ["drew" in str(d["customdata"][0]) for d in signal] == [True, False, False]
    assert {d["name"]: d["y"][0] for d in signal} == {
        "correctness": pytest.approx(1 / 3),
        "shaping only": pytest.approx(1 / 3),
        "none: no advantage": pytest.approx(1 / 3),
    }
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["right → wrong"], metrics["wrong → right"]) == ("0", "1")
    assert metrics["drawn at two steps or more"] == "3"
    [flips] = [df.value for df in at.dataframe if "flip" in df.value.columns]
    row = flips.iloc[0]
    assert (row["question id"], row["first step"], row["last step"]) == ("q-learnt", 0, 1099)
    assert (row["correct at first"], row["correct at last"]) == ("0/2", "2/2")
    assert row["question"] == "How many rows for q-learnt?"
    assert "groups:" not in texts(at)
