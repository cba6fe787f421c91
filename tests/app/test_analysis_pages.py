"""The analysis views rendered by Streamlit's AppTest against a real store: GRPO groups, the
question map, failure classes on Runs, Episodes and Compare."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.failure_classes import FAILURE_LABELS
from rollout_core.records import EpisodeKey
from storage.read_models import GroupKey
from storage.store import Store
from storage.training import GroupTag, TrainingSink
from tests.app.analysis_store import (
    HOSTILE_OUTPUT,
    AnalysisStore,
    build_analysis_store,
)
from tests.app.dashboard.apptest import open_page, texts
from tests.storage.store_builders import spec
from tests.storage.test_training_store import play_group


@pytest.fixture(scope="module")
def analysis_store(tmp_path_factory: pytest.TempPathFactory) -> AnalysisStore:
    return build_analysis_store(tmp_path_factory.mktemp("analysis"))


@pytest.fixture
def fx(analysis_store: AnalysisStore, monkeypatch: pytest.MonkeyPatch) -> AnalysisStore:
    monkeypatch.setenv(ENV_STORE, analysis_store.url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return analysis_store


# -- GRPO groups ---------------------------------------------------------------------------------


def test_groups_overview_sorts_questions_by_variance_and_counts_signal(fx: AnalysisStore) -> None:
    at = open_page("views/groups.py", run=str(fx.runs["ckpt-100"]))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["groups"] == "6" and metrics["with signal"] == "66.7%"
    assert (metrics["all correct"], metrics["all wrong"]) == ("1", "1")
    table = at.dataframe[0].value
    assert list(table["std"]) == sorted(table["std"], reverse=True)
    assert list(table["question id"][-2:]) == ["q-count", "q-oldest"]
    assert list(table["signal"]) == [True] * 4 + [False] * 2
    assert table["question"].iloc[0].startswith("Which singers are from Peru")
    # The std histogram, binned by the store: the two groups without signal in a bar of
    # their own, the four with signal in bins of 0.05 by their std.
    [chart] = at.get("plotly_chart")
    flat, signal = json.loads(chart.proto.spec)["data"]
    assert (flat["name"], flat["y"]) == ("no signal (std 0)", [2])
    bins = [int(x / 0.05) for x in signal["x"]]
    expected = Counter(int(s / 0.05 + 1e-9) for s in table["std"] if s > 0)
    assert dict(zip(bins, signal["y"], strict=True)) == {b: expected[b] for b in bins}
    assert sum(signal["y"]) == 4


def test_a_group_shows_its_samples_rewards_advantages_and_steps(fx: AnalysisStore) -> None:
    run_id = fx.runs["ckpt-100"]
    at = open_page("views/groups.py", run=str(run_id), question="q-france")
    group = Store(fx.url, read_only=True).get_group(run_id, GroupKey("q-france"))
    assert group is not None
    members = at.dataframe[0].value
    assert list(members["sample"]) == [0, 1, 2, 3]
    assert list(members["advantage"]) == pytest.approx([m.advantage for m in group.members])
    assert list(members["class"]) == [
        FAILURE_LABELS[c] for c in ("correct", "wrong_after_gold", "action_loop", "unparsed")
    ]
    assert members["advantage"].iloc[0] > 0 > members["advantage"].iloc[1]
    grid = at.dataframe[1].value
    assert list(grid.index) == [1, 2, 3, 4] and len(grid.columns) == 4
    assert grid.iloc[0, 2] == "DESCRIBE singer"
    assert "Zero reward variance" not in texts(at)
    assert HOSTILE_OUTPUT in [c.value for c in at.code]  # sample 3's step 1, as text
    assert not at.get("html")
    at.slider[0].set_value(2).run()
    assert "ANSWER" in texts(at)


def test_a_zero_variance_group_is_flagged(fx: AnalysisStore) -> None:
    at = open_page("views/groups.py", run=str(fx.runs["ckpt-100"]), question="q-oldest")
    assert "Zero reward variance" in texts(at)
    assert list(at.dataframe[0].value["advantage"]) == [0.0] * 4


def test_groups_of_an_unknown_question_or_a_run_without_samples(fx: AnalysisStore) -> None:
    at = open_page("views/groups.py", run=str(fx.runs["ckpt-100"]), question="q-nope")
    assert "no finished episode of question q-nope" in at.warning[0].value
    at = open_page("views/groups.py", run="999")
    assert "run='999' in the link is not a run in this store" in at.warning[0].value


@pytest.fixture
def training_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A training run: q1 all right at step 0 and all wrong at step 1, q2 mixed at step 1."""
    url = str(tmp_path / "training.db")
    store = Store(url)
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=9)
    tags = {EpisodeKey("q1", s): GroupTag(0, 0) for s in range(3)}
    tags |= {EpisodeKey("q1", s): GroupTag(1, 1) for s in range(3, 6)}
    tags |= {EpisodeKey("q2", s): GroupTag(1, 2) for s in range(3)}
    sink = TrainingSink(store, run_id, tags)
    play_group(sink, "q1", range(3), [1.0, 1.0, 1.0])
    play_group(sink, "q1", range(3, 6), [0.0, 0.0, 0.0])
    play_group(sink, "q2", range(3), [1.0, 0.0, 0.0])
    store.close()
    monkeypatch.setenv(ENV_STORE, url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    return url, run_id


def test_a_training_runs_groups_are_a_question_at_a_step(training_run: tuple[str, int]) -> None:
    _, run_id = training_run
    at = open_page("views/groups.py", run=str(run_id))
    metrics = {m.label: m.value for m in at.metric}
    # Pooled over the run, q1's six samples were one group with signal: 2 of 2.
    assert metrics["groups"] == "3" and metrics["with signal"] == "33.3%"
    table = at.dataframe[0].value
    assert [(q, s) for q, s in zip(table["question id"], table["training step"], strict=True)] == [
        ("q2", 1), ("q1", 0), ("q1", 1)
    ]  # fmt: skip
    assert table["open"].iloc[2] == f"groups?run={run_id}&question=q1&group=1"
    assert "Groups by reward variance" in [h.value for h in at.subheader]

    at = open_page("views/groups.py", run=str(run_id), question="q1", group="1")
    assert "Question q1, training step 1" in [h.value for h in at.subheader]
    assert list(at.dataframe[0].value["sample"]) == [3, 4, 5]
    assert "Zero reward variance" in texts(at)


def test_a_training_question_without_its_group_lists_its_groups(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    for group in (None, "x"):  # none in the link (as the question map links), or a bad one
        query = {"run": str(run_id), "question": "q1"} | ({"group": group} if group else {})
        at = open_page("views/groups.py", **query)
        table = at.dataframe[0].value
        assert list(table["question id"]) == ["q1", "q1"]
        assert sorted(table["training step"]) == [0, 1]
    assert "group='x' in the link is not a group number" in at.warning[0].value


def test_a_group_number_without_its_question_shows_all_groups_and_says_so(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("views/groups.py", run=str(run_id), group="1")
    assert "group=1 in the link comes without its question" in at.warning[0].value
    assert len(at.dataframe[0].value) == 3  # the overview, every group


def test_a_training_question_the_run_never_played_says_so_and_shows_all_groups(
    training_run: tuple[str, int],
) -> None:
    _, run_id = training_run
    at = open_page("views/groups.py", run=str(run_id), question="q-nope")
    assert "has no finished episode of question q-nope; showing all its groups" in (
        at.warning[0].value
    )
    assert len(at.dataframe[0].value) == 3  # every group of the run
    assert "Groups by reward variance" in [h.value for h in at.subheader]


# -- question map --------------------------------------------------------------------------------


def test_the_map_shows_rates_flips_and_accuracy(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-100", "ckpt-200", "ckpt-300")]
    at = open_page("views/checkpoint_map.py", run=ids)
    assert len(at.get("plotly_chart")) == 2  # heatmap, accuracy line
    summary = at.dataframe[0].value
    assert list(summary["from"]) == ["ckpt-100", "ckpt-200"]
    # ckpt-100 -> 200: q-count lost (4/4 -> 1/4); q-france, q-join (2/4), q-oldest gained
    assert list(summary["regressions"]) == [1, 1]
    assert list(summary["improvements"]) == [3, 1]
    flips = at.dataframe[1].value
    assert list(flips["question id"]) == ["q-count", "q-france", "q-join", "q-oldest"]
    assert flips["compare"].iloc[0].endswith(f"run={ids[0]}&run={ids[1]}&question=q-count")
    at.selectbox[0].set_value(1).run()
    assert list(at.dataframe[1].value["question id"]) == ["q-oldest", "q-count"]


def test_the_map_follows_the_run_order_given(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-300", "ckpt-100")]
    at = open_page("views/checkpoint_map.py", run=ids)
    summary = at.dataframe[0].value
    assert (summary["from"].iloc[0], summary["to"].iloc[0]) == ("ckpt-300", "ckpt-100")
    assert at.query_params["run"] == ids


def test_the_map_needs_two_runs(fx: AnalysisStore) -> None:
    at = open_page("views/checkpoint_map.py", run=str(fx.runs["ckpt-100"]))
    assert "Choose two or more runs" in texts(at)


# -- failure classes -----------------------------------------------------------------------------


def test_runs_chart_the_failure_mix(fx: AnalysisStore) -> None:
    at = open_page(None)
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert any('"Failure classes"' in spec for spec in charts)
    assert any(FAILURE_LABELS["wrong_after_gold"] in spec for spec in charts)


def test_episodes_filter_by_failure_class_from_the_url(fx: AnalysisStore) -> None:
    at = open_page("episodes/page.py", run=str(fx.runs["ckpt-100"]), **{"class": "action_loop"})
    table = at.dataframe[0].value
    assert len(table) == 5 and set(table["class"]) == {FAILURE_LABELS["action_loop"]}
    at.multiselect[2].set_value(["unparsed", "sql_errors"]).run()
    assert at.query_params["class"] == ["unparsed", "sql_errors"]
    assert sorted(at.dataframe[0].value["class"]) == sorted(
        [FAILURE_LABELS["unparsed"]] * 2 + [FAILURE_LABELS["sql_errors"]]
    )


def test_compare_shows_how_the_mix_moved_and_each_sides_confidence(fx: AnalysisStore) -> None:
    a, b = fx.runs["ckpt-100"], fx.runs["ckpt-200"]
    at = open_page("compare/page.py", run=[str(a), str(b)], question="q-count")
    shift = next(df.value for df in at.dataframe if "change (points)" in df.value.columns)
    by_class = shift.set_index("class")
    assert by_class.loc["correct", "ckpt-100 episodes"] == 10
    assert by_class.loc["correct", "ckpt-200 episodes"] == 16
    assert by_class.loc["correct", "change (points)"] == pytest.approx(100 * (16 - 10) / 24)
    assert by_class.loc["stuck on SQL errors", "open ckpt-200"] == (
        f"episodes?run={b}&class=sql_errors"
    )
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Confidence per step" in s for s in specs)
