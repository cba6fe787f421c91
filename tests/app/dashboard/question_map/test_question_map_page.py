"""The question map page rendered by Streamlit's AppTest against the analysis store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from rollout_core.records import Outcome
from storage.read_models import RunStep
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.dashboard_stores import AnalysisStore, ComparisonStore
from tests.support.records import play, spec
from tests.support.stores import correct_once_each, play_group


def test_the_map_shows_rates_flips_and_accuracy(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-100", "ckpt-200", "ckpt-300")]
    at = open_page("question_map/page.py", run=ids)
    assert len(at.get("plotly_chart")) == 2  # heatmap, accuracy line
    summary = at.dataframe[0].value
    assert list(summary["from"]) == ["ckpt-100", "ckpt-200"]
    # ckpt-100 -> 200: q-count lost (4/4 -> 1/4); q-france, q-join (2/4), q-oldest gained
    assert list(summary["regressions"]) == [1, 1]
    assert list(summary["improvements"]) == [3, 1]
    flips = at.dataframe[1].value
    assert list(flips["question id"]) == ["q-count", "q-france", "q-join", "q-oldest"]
    assert list(flips["open"]) == [":material/compare: side by side"] * 4
    # A button that navigates in place, as Episodes' "open" (a link column opened a new tab).
    types = {
        n: c["type_config"]["type"]
        for n, c in json.loads(at.dataframe[1].proto.columns).items()
        if "type_config" in c
    }
    assert types["open"] == "button" and "link" not in types.values()
    at.selectbox[0].set_value(1).run()
    assert list(at.dataframe[1].value["question id"]) == ["q-oldest", "q-count"]


def test_the_map_follows_the_run_order_given(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-300", "ckpt-100")]
    at = open_page("question_map/page.py", run=ids)
    summary = at.dataframe[0].value
    assert (summary["from"].iloc[0], summary["to"].iloc[0]) == ("ckpt-300", "ckpt-100")
    assert at.query_params["run"] == ids


def test_the_map_needs_two_runs(fx: AnalysisStore) -> None:
    at = open_page("question_map/page.py", run=str(fx.runs["ckpt-100"]))
    assert "Choose two or more runs" in texts(at)


def test_the_same_run_twice_is_one_run(fx: AnalysisStore) -> None:
    one = str(fx.runs["ckpt-100"])
    at = open_page("question_map/page.py", run=[one, one])
    assert at.multiselect[0].value == [int(one)]
    assert f"run={one} comes more than once in the link" in at.warning[0].value
    assert "Choose two or more runs" in texts(at)


def test_flips_of_opens_on_a_pair_that_has_flips(
    tmp_path: Path, serve_store: Callable[[str], None]
) -> None:
    # Runs a and b solve the same question, c does not: "Flips of" showed a -> b, "No
    # question changed", when b -> c had the flip.
    store = Store(str(tmp_path / "three.db"))
    ids = []
    for name, right in (("a", True), ("b", True), ("c", False)):
        run_id = store.create_run(spec(name), episodes_planned=1)
        outcome: Outcome = "correct" if right else "wrong"
        store.sink(run_id).write(play("q1", 0, outcome, float(right), 2))
        ids.append(str(run_id))
    store.close()
    serve_store(str(tmp_path / "three.db"))
    at = open_page("question_map/page.py", run=ids)
    assert list(at.dataframe[0].value["regressions"]) == [0, 1]
    assert at.selectbox[0].value == 1
    assert list(at.dataframe[1].value["question id"]) == ["q1"]
    at.selectbox[0].set_value(0).run()  # the other pair still opens on request
    assert "No question changed between these two runs." in texts(at)


def test_the_caption_says_a_click_opens_grpo_groups(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-100", "ckpt-200")]
    at = open_page("question_map/page.py", run=ids)
    shown = texts(at)
    assert "click it to open that run's samples of the question on GRPO groups" in shown
    assert "opens its episodes" not in shown
    heatmap = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    assert "RdYlGn" not in json.dumps(heatmap["colorscale"])


def _heatmap_rows(at: AppTest) -> int:
    """The questions the heatmap names on its y axis."""
    return len(json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"]["ticktext"])


def test_runs_on_different_questions_map_the_questions_every_run_played(
    compare_env: ComparisonStore,
) -> None:
    # train played questions 0-2, everything 0-5: the map was half grey.
    ids = [str(compare_env.train), str(compare_env.everything)]
    at = open_page("question_map/page.py", run=ids)
    (box,) = at.checkbox
    assert box.label == "Only questions every chosen run played" and box.value
    assert _heatmap_rows(at) == 3
    shown = texts(at)
    assert "3 questions every chosen run played (3 of the 6 left out" in shown
    assert "Grey: not played" not in shown
    accuracy = json.loads(at.get("plotly_chart")[1].proto.spec)["data"][0]
    assert accuracy["mode"] == "lines+markers"  # over the same questions: a trend
    assert list(at.dataframe[0].value["shared questions"]) == [3]
    box.uncheck().run()
    assert _heatmap_rows(at) == 6 and "Grey: not played" in texts(at)
    assert at.query_params["shared"] == "0"


def test_a_link_with_shared_0_maps_every_question(compare_env: ComparisonStore) -> None:
    ids = [str(compare_env.train), str(compare_env.everything)]
    at = open_page("question_map/page.py", run=ids, shared="0")
    assert not at.checkbox[0].value and _heatmap_rows(at) == 6


def test_runs_that_share_no_question_say_so_instead_of_an_empty_map(
    compare_env: ComparisonStore,
) -> None:
    at = open_page("question_map/page.py", run=[str(compare_env.train), str(compare_env.heldout)])
    assert not at.get("plotly_chart") and not at.dataframe
    (info,) = at.info
    assert info.value == (
        "These runs share no question: pick runs that share questions, or untick the box "
        "above to map all 6."
    )
    at.checkbox[0].uncheck().run()
    assert _heatmap_rows(at) == 6


def test_runs_on_the_same_questions_show_no_such_control(fx: AnalysisStore) -> None:
    ids = [str(fx.runs[n]) for n in ("ckpt-100", "ckpt-200")]
    at = open_page("question_map/page.py", run=ids)
    assert not at.checkbox
    assert "every chosen run played" not in texts(at)


def test_training_steps_of_one_run_map_as_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An evaluation at steps 10, 20 and 30 on q1 and q2, two samples each: q1 is learnt at
    # step 20, q2 at step 30.
    store = Store(str(tmp_path / "s.db"))
    grpo = store.create_run(spec("val", kind="training"), episodes_planned=12)
    sink = store.sink(grpo)
    group = 0
    for step, q1, q2 in ((10, [0.0, 0.0], [0.0, 0.0]), (20, [1.0, 1.0], [0.0, 0.0]),
                         (30, [1.0, 1.0], [1.0, 0.0])):  # fmt: skip
        for q, rewards in (("q1", q1), ("q2", q2)):
            play_group(sink, q, range(group * 2, group * 2 + 2), rewards, (step, group))
            group += 1
    store.set_run_status(grpo, "completed")
    store.close()
    serve_env(monkeypatch, str(tmp_path / "s.db"))
    steps = [f"{grpo}@10", f"{grpo}@20", f"{grpo}@30"]
    at = open_page("question_map/page.py", run=steps)
    assert at.multiselect[0].value == [RunStep(grpo, s) for s in (10, 20, 30)]
    summary = at.dataframe[0].value
    assert list(summary["from"]) == ["val @ step 10", "val @ step 20"]
    assert list(summary["improvements"]) == [1, 1] and list(summary["regressions"]) == [0, 0]
    heat, line = (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
    # The run is named once, in the titles, and each column by its step alone.
    for chart in (heat, line):
        assert chart["layout"]["title"]["text"].split("</span> ")[-1].startswith(f"val #{grpo}")
    assert heat["layout"]["xaxis"]["ticktext"] == ["step 10", "step 20", "step 30"]
    assert line["data"][0]["x"] == ["step 10", "step 20", "step 30"]
    assert line["data"][0]["y"] == [0.0, 0.5, 0.75]
    # A flip opens the two steps side by side on Compare.
    flips = at.dataframe[1].value
    assert list(flips["question id"]) == ["q1"]
    assert [h.value for h in at.subheader][-1] == "Flips between consecutive steps"
    assert "the same draws for every step" in " ".join(c.value for c in at.caption)
    # Beside a whole run, each column names its run.
    at = open_page("question_map/page.py", run=[str(grpo), *steps[:2]])
    assert [h.value for h in at.subheader][-1] == "Flips between consecutive runs"
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert heat["layout"]["title"]["text"] == "Success rate per question and run"
    assert [t.split("</span> ")[-1] for t in heat["layout"]["xaxis"]["ticktext"]] == [
        f"val #{grpo}",
        f"val @ step 10 #{grpo}",
        f"val @ step 20 #{grpo}",
    ]
    # Steps a link names that the run lacks are said; the rest are mapped.
    at = open_page("question_map/page.py", run=[*steps[:2], f"{grpo}@15"])
    assert f"Run {grpo} has no finished episode at training step 15" in at.warning[0].value
    assert len(at.get("plotly_chart")) == 2


def test_counts_of_a_thousand_questions_or_more_are_grouped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "s.db"))
    a = correct_once_each(store, "a", range(600))
    b = correct_once_each(store, "b", range(600, 1300))
    both = correct_once_each(store, "both", range(1300))
    store.close()
    serve_env(monkeypatch, str(tmp_path / "s.db"))
    at = open_page("question_map/page.py", run=[str(a), str(b)])
    (info,) = at.info
    assert info.value.endswith("or untick the box above to map all 1,300.")
    at.checkbox[0].uncheck().run()
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert heat["layout"]["yaxis"]["title"]["text"] == "1,300 questions, easiest first"
    summary = at.dataframe[0]
    assert summary.value["shared questions"].iloc[0] == 0
    columns = json.loads(summary.proto.columns).items()
    # The table's cells group thousands as the sentences do.
    formats = {n: c.get("type_config", {}).get("format") for n, c in columns}
    assert {formats[c] for c in ("regressions", "improvements", "net", "shared questions")} == {
        "%,d"
    }
    at = open_page("question_map/page.py", run=[str(a), str(both)])
    assert "600 questions every chosen run played (700 of the 1,300 left out" in texts(at)
