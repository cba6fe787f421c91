"""The GRPO groups page rendered by Streamlit's AppTest against real stores: a batch run's
questions, a training run's groups, and where each group's reward spread comes from."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.groups.charts import std_bin_label
from app.recorder import Recorder
from rollout_core.failure_classes import FAILURE_LABELS
from storage.read_models import EpisodeFilter, EpisodeSummary, GroupKey
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.dashboard_stores import AnalysisStore
from tests.support.long_training import LongTraining
from tests.support.personas import HOSTILE_OUTPUT
from tests.support.records import spec
from tests.support.stores import play_group


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: str(m.value) for m in at.metric}


def test_groups_overview_sorts_questions_by_variance_and_counts_signal(fx: AnalysisStore) -> None:
    at = open_page("groups/page.py", run=str(fx.runs["ckpt-100"]))
    metrics = _metrics(at)
    assert metrics["groups"] == "6" and metrics["correctness signal"] == "4 (66.7%)"
    assert (metrics["all correct"], metrics["no correct sample"]) == ("1", "1")
    assert metrics["no advantage"] == "2 (33.3%)" and metrics["shaping only"] == "0 (0.0%)"
    table = at.dataframe[0].value
    assert list(table["std"]) == sorted(table["std"], reverse=True)
    assert list(table["question id"][-2:]) == ["q-count", "q-oldest"]
    assert list(table["spread from"]) == ["correctness"] * 4 + ["none: no advantage"] * 2
    assert table["question"].iloc[0].startswith("Which singers are from Peru")
    # The std histogram: the two groups without signal in a bar of their own, the four with
    # signal in bins of 0.05 by their std, stacked by source.
    [chart] = at.get("plotly_chart")
    flat, correctness, shaping = json.loads(chart.proto.spec)["data"]
    assert (flat["name"], flat["x"], flat["y"]) == ("none: no advantage", ["no advantage"], [2])
    expected = Counter(std_bin_label(int(s / 0.05 + 1e-9)) for s in table["std"] if s > 0)
    bins = dict(zip(correctness["x"], correctness["y"], strict=True))
    assert bins == {b: expected[b] for b in bins}
    assert sum(correctness["y"]) == 4 and sum(shaping["y"]) == 0


def test_a_group_shows_its_samples_rewards_advantages_and_steps(fx: AnalysisStore) -> None:
    run_id = fx.runs["ckpt-100"]
    at = open_page("groups/page.py", run=str(run_id), question="q-france")
    group = Store(fx.url, read_only=True).get_group(run_id, GroupKey("q-france"))
    assert group is not None
    members = at.dataframe[0].value
    assert list(members["sample"]) == [0, 1, 2, 3]
    assert list(members["advantage"]) == pytest.approx([m.advantage for m in group.members])
    assert list(members["class"]) == [
        FAILURE_LABELS[c] for c in ("correct", "wrong_after_gold", "action_loop", "unparsed")
    ]
    assert members["advantage"].iloc[0] > 0 > members["advantage"].iloc[1]
    # Each reward and advantage split into what correctness and shaping give.
    assert list(members["correctness"]) == [1.0, 0.0, 0.0, 0.0]
    assert list(members["correctness"] + members["shaping"]) == pytest.approx(
        list(members["reward"])
    )
    assert list(members["from correctness"] + members["from shaping"]) == pytest.approx(
        list(members["advantage"])
    )
    assert _metrics(at)["spread from"] == "correctness"
    grid = at.dataframe[1].value
    assert list(grid.index) == [1, 2, 3, 4] and len(grid.columns) == 4
    assert grid.iloc[0, 2] == "DESCRIBE singer"
    assert "Zero reward variance" not in texts(at)
    assert HOSTILE_OUTPUT in [c.value for c in at.code]  # sample 3's step 1, as text
    assert not at.get("html")
    at.slider[0].set_value(2).run()
    assert "ANSWER" in texts(at)


def test_a_group_shows_the_trainers_advantages_beside_its_own_where_recorded(
    tmp_path: Path, serve_store: Callable[[str], None]
) -> None:
    url = str(tmp_path / "store.db")
    # Weighted rewards (as a trainer's reward_weights do): its advantages are not GRPO's
    # default ones computed from the total.
    with Recorder(url, run="weighted", kind="training") as rec:
        for reward, advantage in ((1.0, 0.9), (0.0, -0.9), (0.5, 0.0)):
            turns = [{"role": "assistant", "content": "ANSWER 6"}]
            rec.episode(
                question="How many singers?",
                turns=turns,
                reward=reward,
                step=0,
                advantage=advantage,
            )
        rec.episode(question="How many concerts?", turns=turns, reward=1.0, step=0)
    serve_store(url)
    read = Store(url, read_only=True)

    def group_of(episode: EpisodeSummary) -> AppTest:
        detail = read.get_episode(episode.id)
        assert detail is not None
        link = {"run": str(episode.run_id), "group": str(detail.group_index)}
        return open_page("groups/page.py", question=episode.question_id, **link)

    first, *_, last = read.list_episodes(EpisodeFilter()).items
    at = group_of(first)
    members = at.dataframe[0].value
    assert list(members["trainer's advantage"]) == [0.9, -0.9, 0.0]
    assert list(members["advantage"]) == pytest.approx([1.0, -1.0, 0.0], abs=1e-3)
    assert "The trainer gave these samples other advantages" in texts(at)
    at = group_of(last)  # recorded without one
    assert "trainer's advantage" not in at.dataframe[0].value.columns
    assert "The trainer gave" not in texts(at)


def test_a_zero_variance_group_is_flagged(fx: AnalysisStore) -> None:
    at = open_page("groups/page.py", run=str(fx.runs["ckpt-100"]), question="q-oldest")
    assert "Zero reward variance" in texts(at)
    assert list(at.dataframe[0].value["advantage"]) == [0.0] * 4


def test_groups_of_an_unknown_question_or_a_run_without_samples(fx: AnalysisStore) -> None:
    at = open_page("groups/page.py", run=str(fx.runs["ckpt-100"]), question="q-nope")
    assert "no finished episode of question q-nope" in at.warning[0].value
    at = open_page("groups/page.py", run="999")
    assert "run='999' in the link is not a run in this store" in at.warning[0].value


def test_the_group_chart_draws_every_sample_in_its_runs_colour(fx: AnalysisStore) -> None:
    from app.dashboard.components.colors import run_color

    run_id = fx.runs["ckpt-200"]
    at = open_page("groups/page.py", run=str(run_id), question="q-france")
    [chart] = [c for c in at.get("plotly_chart") if "Confidence per step" in c.proto.spec]
    traces = json.loads(chart.proto.spec)["data"]
    assert {t["line"]["color"] for t in traces} == {run_color(run_id)}
    # The samples, one colour, differ by their marks.
    tops = [t for t in traces if t.get("showlegend") is not False]
    assert len({t["marker"]["symbol"] for t in tops}) == len(tops) == 4


def _column_types(at: AppTest) -> list[dict[str, str]]:
    """Each data frame's column types by column name."""
    return [
        {
            name: c.get("type_config", {}).get("type", "")
            for name, c in json.loads(df.proto.columns).items()
        }
        for df in at.dataframe
    ]


def test_table_links_are_open_buttons_that_navigate_in_place(fx: AnalysisStore) -> None:
    # A link column opened a group in a new tab on a second click; Episodes' "open" is a
    # button that navigates in place.
    run_id = str(fx.runs["ckpt-100"])
    overview, group = (
        open_page("groups/page.py", run=run_id),
        open_page("groups/page.py", run=run_id, question="q-france"),
    )
    for at in (overview, group):
        first = _column_types(at)[0]
        assert first["open"] == "button" and "link" not in first.values()
        assert "link" not in [t for types in _column_types(at) for t in types.values()]


# -- a training run ------------------------------------------------------------------------------


Played = tuple[str, range, list[float], tuple[int, int]]
"""A group as `play_group` writes it: question, samples, rewards, (training step, number)."""


def _served_training(
    tmp_path: Path, serve_store: Callable[[str], None], played: list[Played]
) -> tuple[str, int]:
    """A store of one training run of these groups, served; its URL and the run's id."""
    url = str(tmp_path / "training.db")
    store = Store(url)
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=9)
    sink = store.sink(run_id)
    for group in played:
        play_group(sink, *group)
    store.close()
    serve_store(url)
    return url, run_id


@pytest.fixture
def training_run(tmp_path: Path, serve_store: Callable[[str], None]) -> tuple[str, int]:
    """A training run: q1 all right at step 0 and all wrong at step 1, q2 mixed at step 1."""
    return _served_training(
        tmp_path,
        serve_store,
        [
            ("q1", range(3), [1.0, 1.0, 1.0], (0, 0)),
            ("q1", range(3, 6), [0.0, 0.0, 0.0], (1, 1)),
            ("q2", range(3), [1.0, 0.0, 0.0], (1, 2)),
        ],
    )


def test_a_training_runs_groups_are_a_question_at_a_step(training_run: tuple[str, int]) -> None:
    _, run_id = training_run
    at = open_page("groups/page.py", run=str(run_id))
    metrics = _metrics(at)
    # Pooled over the run, q1's six samples were one group with signal: 2 of 2.
    assert metrics["groups"] == "3" and metrics["correctness signal"] == "1 (33.3%)"
    table = at.dataframe[0].value
    assert [(q, s) for q, s in zip(table["question id"], table["training step"], strict=True)] == [
        ("q2", 1), ("q1", 0), ("q1", 1)
    ]  # fmt: skip
    assert "Groups by reward variance" in [h.value for h in at.subheader]

    at = open_page("groups/page.py", run=str(run_id), question="q1", group="1")
    assert "Question q1, training step 1" in [h.value for h in at.subheader]
    assert list(at.dataframe[0].value["sample"]) == [3, 4, 5]
    assert "Zero reward variance" in texts(at)


def test_a_training_question_without_its_group_lists_its_groups(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    for group in (None, "x"):  # none in the link (as the question map links), or a bad one
        query = {"run": str(run_id), "question": "q1"} | ({"group": group} if group else {})
        at = open_page("groups/page.py", **query)
        table = at.dataframe[0].value
        assert list(table["question id"]) == ["q1", "q1"]
        assert sorted(table["training step"]) == [0, 1]
    assert "group='x' in the link is not a group number" in at.warning[0].value


def test_a_group_number_without_its_question_shows_all_groups_and_says_so(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("groups/page.py", run=str(run_id), group="1")
    assert "group=1 in the link comes without its question" in at.warning[0].value
    assert len(at.dataframe[0].value) == 3  # the overview, every group


def test_a_training_question_the_run_never_played_says_so_and_shows_all_groups(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("groups/page.py", run=str(run_id), question="q-nope")
    assert "has no finished episode of question q-nope; showing all its groups" in (
        at.warning[0].value
    )
    assert len(at.dataframe[0].value) == 3  # every group of the run
    assert "Groups by reward variance" in [h.value for h in at.subheader]


def test_a_range_of_training_steps_counts_and_lists_only_its_groups(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("groups/page.py", run=str(run_id), tmin="1", tmax="1")
    assert [n.value for n in at.number_input] == [1, 1]
    assert _metrics(at)["groups"] == "2"  # q1 and q2 at step 1; q1 at step 0 left out
    table = at.dataframe[0].value
    assert sorted(zip(table["question id"], table["training step"], strict=True)) == [
        ("q1", 1), ("q2", 1)
    ]  # fmt: skip
    assert "The 2 groups at training step 1." in texts(at)
    # The inputs change the range as the link does, and one past the run's steps says so.
    at.number_input(key="gr_tmax").set_value(None).run()
    assert "tmax" not in at.query_params and at.query_params["tmin"] == "1"
    at.number_input(key="gr_tmin").set_value(7).run()
    assert "grpo has no group at training steps from 7." in texts(at)
    at = open_page("groups/page.py", run=str(run_id), tmin="2", tmax="0")
    assert "**From training step** 2 is above **To training step** 0." in texts(at)
    # A question's groups within the range.
    at = open_page("groups/page.py", run=str(run_id), question="q1", tmin="0", tmax="0")
    assert list(at.dataframe[0].value["training step"]) == [0]


# -- where the spread comes from -----------------------------------------------------------------


@pytest.fixture
def shaped_run(tmp_path: Path, serve_store: Callable[[str], None]) -> int:
    """Four groups of four: q1 all wrong at both steps (apart by penalties at step 0, equal at
    step 1), q2 mixed at step 0 and all right at step 1 (apart by a progress reward)."""
    url = str(tmp_path / "shaped.db")
    store = Store(url)
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=16)
    plays = [
        ("q1", 0, [0.0, -0.01, -0.02, 0.0]),
        ("q2", 0, [1.0, 0.0, 0.0, 0.0]),
        ("q1", 1, [0.0, 0.0, 0.0, 0.0]),
        ("q2", 1, [1.1, 1.0, 1.0, 1.0]),
    ]
    sink = store.sink(run_id)
    for g, (q, step, rewards) in enumerate(plays):
        play_group(sink, q, range(4 * step, 4 * step + 4), rewards, (step, g))
    store.close()
    serve_store(url)
    return run_id


def test_the_counts_name_where_the_spread_comes_from(shaped_run: int) -> None:
    # Before: "with signal 75.0%, all correct 0, all wrong 1", as if three groups of four
    # were informative when two of them differ only by shaping.
    at = open_page("groups/page.py", run=str(shaped_run))
    metrics = _metrics(at)
    assert metrics["groups"] == "4"
    assert metrics["correctness signal"] == "1 (25.0%)"
    assert metrics["shaping only"] == "2 (50.0%)"
    assert metrics["no advantage"] == "1 (25.0%)"
    assert metrics["no correct sample"] == "2"  # q1 at both steps, whatever their rewards
    assert metrics["all correct"] == "1"  # q2 at step 1, although its rewards differ
    assert "with signal" not in metrics and "all wrong" not in metrics
    assert "2 of 4 groups get their advantages from shaping alone" in texts(at)
    table = at.dataframe[0].value.set_index(["question id", "training step"])
    assert table.loc[("q1", 0), "spread from"] == "⚠ shaping only"
    assert table.loc[("q2", 1), "spread from"] == "⚠ shaping only"
    assert table.loc[("q2", 0), "spread from"] == "correctness"
    assert table.loc[("q1", 1), "spread from"] == "none: no advantage"
    [chart] = at.get("plotly_chart")
    flat, correctness, shaping = json.loads(chart.proto.spec)["data"]
    assert (flat["y"], sum(correctness["y"]), sum(shaping["y"])) == ([1], 1, 2)


def test_groups_without_advantage_have_a_bar_of_their_own_and_one_name(shaped_run: int) -> None:
    # Before: the std-0 group and the shaping groups (std 0.008) stacked in one bar ticked
    # "0.03", under an axis saying "0: no learning signal", beside a metric "all rewards
    # equal" and a legend "none: no advantage".
    at = open_page("groups/page.py", run=str(shaped_run))
    assert "all rewards equal" not in _metrics(at)
    assert _metrics(at)["no advantage"] == "1 (25.0%)"
    [chart] = at.get("plotly_chart")
    spec = json.loads(chart.proto.spec)
    flat, _, shaping = spec["data"]
    assert (flat["x"], flat["y"], flat["name"]) == (["no advantage"], [1], "none: no advantage")
    # q1 at step 0 (std 0.010) in the first bin, q2 at step 1 (std 0.050) in the next.
    assert (shaping["x"], shaping["y"]) == (["0.00–0.05", "0.05–0.10"], [1, 1])
    xaxis = spec["layout"]["xaxis"]
    assert xaxis["categoryarray"][:2] == ["no advantage", "0.00–0.05"]
    assert "0:" not in xaxis["title"]["text"]


def test_a_shaping_only_group_says_its_advantages_are_shaping(shaped_run: int) -> None:
    at = open_page("groups/page.py", run=str(shaped_run), question="q1", group="0")
    assert _metrics(at)["spread from"] == "⚠ shaping only"
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("Advantages from shaping alone: none of the samples is correct")
    members = at.dataframe[0].value
    # Rewards 0, -0.01, -0.02, 0: penalties of a hundredth make advantages near ±1.
    assert max(abs(members["advantage"])) > 0.9
    assert list(members["from correctness"]) == [0.0] * 4
    assert list(members["from shaping"]) == pytest.approx(list(members["advantage"]))
    assert list(members["shaping"]) == pytest.approx([0.0, -0.01, -0.02, 0.0])


def test_a_mixed_group_splits_its_advantages(shaped_run: int) -> None:
    at = open_page("groups/page.py", run=str(shaped_run), question="q2", group="3")
    assert "every sample is correct" in texts(at)
    at = open_page("groups/page.py", run=str(shaped_run), question="q2", group="1")
    assert not at.warning
    assert "the correctness terms' std is 0.500, the shaping terms' 0.000" in texts(at)
    members = at.dataframe[0].value
    assert list(members["from shaping"]) == [0.0] * 4
    assert list(members["from correctness"]) == pytest.approx(list(members["advantage"]))


def test_a_run_of_thousands_of_groups_counts_every_one_by_source(
    long_training: LongTraining,
) -> None:
    # 3,300 groups: the counts come from the store, whatever the page lists.
    at = open_page("groups/page.py", run=str(long_training.run_id))
    metrics = _metrics(at)
    assert metrics["groups"] == "3,300"
    for name in ("correctness signal", "shaping only", "no advantage"):
        assert metrics[name] == "1,100 (33.3%)"
    # None correct: q-shaped at every step, q-learnt before the halfway step.
    assert (metrics["no correct sample"], metrics["all correct"]) == ("1,650", "550")
    assert "1,100 of 3,300 groups get their advantages from shaping alone" in at.warning[0].value
    [chart] = at.get("plotly_chart")
    flat, correctness, shaping = json.loads(chart.proto.spec)["data"]
    assert (flat["y"], sum(correctness["y"]), sum(shaping["y"])) == ([1100], 1100, 1100)
    assert len(at.dataframe[0].value) == 500  # listed: the highest stds
    assert "more than" not in texts(at)


def test_another_run_picked_on_a_group_opens_that_runs_groups(fx: AnalysisStore) -> None:
    # The run picker's change goes back to the picked run's overview: the link names that
    # run and no longer the group of the run before.
    at = open_page("groups/page.py", run=str(fx.runs["ckpt-100"]), question="q-france")
    assert at.subheader[0].value == "Question q-france"
    other = fx.runs["ckpt-200"]
    at.selectbox(key="gr_run").set_value(other).run()
    assert not at.exception, [e.value for e in at.exception]
    assert dict(at.query_params) == {"run": str(other)}
    assert "Question q-france" not in [h.value for h in at.subheader]


def test_a_training_step_past_the_stores_integer_in_the_link_is_noted(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("groups/page.py", run=str(run_id), tmin="9" * 20)  # raised OverflowError
    warned = at.warning[0].value.replace("\\", "")  # markdown's escapes
    assert f"tmin='{'9' * 20}' in the link is not a training step; ignored." in warned
    assert _metrics(at)["groups"] == "3"  # every group of the run


def test_a_step_without_its_group_number_opens_the_questions_group_at_that_step(
    tmp_path: Path, serve_store: Callable[[str], None]
) -> None:
    # The overview's links name a numbered group by its number; a link naming the step alone
    # said the question had no finished episode at a step where it has one group, or two.
    _, run_id = _served_training(
        tmp_path,
        serve_store,
        [
            ("q1", range(3), [1.0, 0.0, 0.0], (0, 0)),
            ("q1", range(3, 6), [1.0, 1.0, 0.0], (1, 1)),
            ("q1", range(6, 9), [0.0, 0.0, 0.0], (1, 2)),
        ],
    )
    at = open_page("groups/page.py", run=str(run_id), question="q1", at="0")
    assert "Question q1, training step 0" in [h.value for h in at.subheader]
    assert list(at.dataframe[0].value["sample"]) == [0, 1, 2]
    at = open_page("groups/page.py", run=str(run_id), question="q1", at="1")
    table = at.dataframe[0].value
    assert list(table["training step"]) == [1, 1] and len(at.warning) == 0
    assert "The 2 groups of question q1 at training step 1; **open** one" in texts(at)
    at = open_page("groups/page.py", run=str(run_id), question="q1", at="7")
    assert "has no finished episode of question q1 at training step 7" in at.warning[0].value
