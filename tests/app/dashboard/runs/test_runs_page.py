"""The Runs page through AppTest on the fixture store: the table, its marks, the charts of the
selected runs, one colour per run."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from app.dashboard.runs import charts
from app.dashboard.runs.table import short_path
from app.render import episodes_text
from storage.read_models import RunSummary
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.dashboard_stores import FixtureStore
from tests.support.records import play, spec


def test_runs_lists_every_run_with_metrics_and_charts(store_env: FixtureStore) -> None:
    at = open_page(None)
    table = at.dataframe[0].value
    assert list(table["id"]) == [store_env.running, store_env.run_b, store_env.run_a]
    by_id = table.set_index("id")
    assert by_id.loc[store_env.run_a, "accuracy"] == pytest.approx(0.5)
    assert by_id.loc[store_env.run_b, "accuracy"] == pytest.approx(4 / 6)
    assert by_id.loc[store_env.running, "status"] == "running"
    assert len(at.get("plotly_chart")) == 6  # accuracy, reward, 2 spreads, actions, classes
    assert "ckpt-3000: running, 1/10 episodes" in [p.proto.text for p in at.get("progress")]
    # Its interval is not Compare's: the page says which each is.
    assert any("counts each episode a trial (Wilson)" in c.value for c in at.caption)


def test_runs_on_an_empty_store_says_how_to_record_one(empty_store: str) -> None:
    at = open_page(None)
    assert "No runs yet" in at.info[0].value
    assert "rollscope run" in at.info[0].value


def test_runs_table_puts_the_numbers_first_and_marks_the_best(store_env: FixtureStore) -> None:
    at = open_page(None)
    table = at.dataframe[0].value
    assert list(table.columns[:10]) == [
        "",
        "run",
        "status",
        "progress",
        "accuracy",
        "95% interval",
        "mean reward",
        "mean steps",
        "parse failures",
        "episodes",
    ]
    by_id = table.set_index("id")
    # ckpt-2000 beats ckpt-1000 on the same dataset; the running ckpt-3000 is no candidate.
    assert by_id.loc[store_env.run_b, "run"] == "★ ckpt-2000"
    assert by_id.loc[store_env.run_a, "run"] == "ckpt-1000"
    assert by_id.loc[store_env.running, "run"] == "ckpt-3000"
    assert by_id.loc[store_env.run_a, "95% interval"] == "19%–81%"
    assert by_id.loc[store_env.run_a, "episodes"] == "6/6"


def test_runs_charts_and_links_follow_the_selected_runs(store_env: FixtureStore) -> None:
    at = open_page(None, run=[str(store_env.run_a), str(store_env.run_b)])
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    labels = {y for c in charts for trace in c["data"] for y in trace.get("y", [])}
    assert any("ckpt-1000" in str(y) for y in labels)
    assert not any("ckpt-3000" in str(y) for y in labels)
    links = {p.proto.label: p.proto.page for p in at.get("page_link")}
    assert "Compare these 2 runs" in links
    at = open_page(None)
    assert "Compare these 2 runs" not in {p.proto.label for p in at.get("page_link")}
    assert "Select runs in the table" in texts(at)


def test_a_run_keeps_its_colour_whatever_else_is_charted(store_env: FixtureStore) -> None:
    runs = {r.id: r for r in Store(store_env.url).list_runs()}

    def colour_of(run_id: int, shown: list[int]) -> str:
        bar = charts.accuracy([runs[i] for i in shown]).data[0]
        return str(bar.marker.color[shown.index(run_id)])

    a, b, running = store_env.run_a, store_env.run_b, store_env.running
    alone = colour_of(a, [a])
    assert colour_of(a, [running, b, a]) == colour_of(a, [b, a]) == alone
    assert colour_of(b, [running, b, a]) != alone  # neighbouring ids, different colours


def test_model_paths_show_their_last_two_parts() -> None:
    assert short_path("hf:/data/models/run1/checkpoint-1000") == "hf:…/run1/checkpoint-1000"
    assert short_path("/data/models/run1/checkpoint-1000") == "…/run1/checkpoint-1000"
    assert short_path("oracle") == "oracle"
    assert short_path(None) == "-"


def test_reward_and_steps_charts_hold_twenty_runs(store_env: FixtureStore) -> None:
    store = Store(store_env.url)
    run = next(r for r in store.list_runs() if r.id == store_env.run_a)
    dist = next(d for d in store.run_distributions([run.id]) if d.run_id == run.id)
    runs = {i: replace(run, id=i, name=f"run-{i}") for i in range(1, 21)}
    dists = [replace(dist, run_id=i) for i in runs]
    for fig, kind in ((charts.reward_strip(dists, runs), "scatter"),
                      (charts.steps_spread(dists, runs), "box")):  # fmt: skip
        assert [t.type for t in fig.data] == [kind] * 20  # one row per run, not 20 bar series
        assert len({t.marker.color for t in fig.data}) == 20
        assert fig.layout.height >= 20 * 20  # each run keeps a readable row


def test_nearly_binary_rewards_are_a_strip_of_bins_not_a_box(store_env: FixtureStore) -> None:
    # Issue 31, polish: a box on rewards of 0 and 1 drew whiskers from -0.05 to 1.05.
    store = Store(store_env.url)
    run = next(r for r in store.list_runs() if r.id == store_env.run_a)
    (dist,) = store.run_distributions([run.id])
    (trace,) = charts.reward_strip([dist], {run.id: run}).data
    counts = {float(v): c for v, c in dist.reward_histogram if c}
    assert sorted(trace.x) == sorted(counts)  # one dot per bin that holds episodes, no whiskers
    assert [c[1] for c in trace.customdata] == [counts[x] for x in trace.x]


def test_a_long_run_name_is_cut_in_charts_and_whole_on_hover(store_env: FixtureStore) -> None:
    # Issue 31, item 4: a fork's 61-character name took half of every chart.
    name = "checkpoint-100-train-fork-ep640-step2-oracle-20261202-224513"
    run = next(r for r in Store(store_env.url).list_runs() if r.id == store_env.run_a)
    bar = charts.accuracy([replace(run, name=name)]).data[0]
    label = bar.y[0]
    assert "checkpoint-100" in label and "224513" in label and len(label) < len(name) + 40
    assert name not in label
    assert name in bar.customdata[0][0] and "%{customdata[0]}" in bar.hovertemplate


def test_runs_with_few_episodes_are_left_out_of_the_default_charts(
    store_env: FixtureStore,
) -> None:
    # Issue 31, item 4: a 1-episode run entered the default charts as a 100% bar.
    at = open_page(None)
    labels = {y for c in at.get("plotly_chart") for t in json.loads(c.proto.spec)["data"]
              for y in t.get("y", [])}  # fmt: skip
    assert not any("ckpt-3000" in str(y) for y in labels)  # 1 of 10 episodes played
    assert any("ckpt-1000" in str(y) for y in labels)
    assert "(1 with fewer are left out)" in texts(at)
    # Selected, it is charted, marked as the few episodes it is.
    at = open_page(None, run=str(store_env.running))
    labels = {y for c in at.get("plotly_chart") for t in json.loads(c.proto.spec)["data"]
              for y in t.get("y", [])}  # fmt: skip
    assert any("ckpt-3000" in str(y) and "(1 ep.)" in str(y) for y in labels)


def test_the_table_says_each_runs_kind_and_a_training_run_links_to_its_views(
    labelled: FixtureStore,
) -> None:
    # Issue 31, polish: no kind column; a training run offered no link to Training or groups.
    trained = Store(labelled.url).create_run(
        spec("grpo", kind="training"), episodes_planned=4, status="running"
    )
    at = open_page(None)
    kinds = dict(zip(at.dataframe[0].value["id"], at.dataframe[0].value["kind"], strict=True))
    assert kinds[trained] == "training" and kinds[labelled.run_a] == "batch"
    at = open_page(None, run=str(trained))
    links = {p.proto.label: (p.proto.page, p.proto.query_string) for p in at.get("page_link")}
    assert links["Training"][0].endswith("training") and f"run={trained}" in links["Training"][1]
    assert f"run={trained}" in links["GRPO groups"][1]
    at = open_page(None, run=str(labelled.run_a))
    assert "Training" not in {p.proto.label for p in at.get("page_link")}


def test_a_run_with_no_plan_shows_its_count_not_an_empty_bar(labelled: FixtureStore) -> None:
    # An env server's run plans no episodes: it read `20/0 episodes` beside a bar stuck at 0%.
    store = Store(labelled.url)
    served = store.create_run(spec("served", kind="env"), episodes_planned=0, status="running")
    store.sink(served).write(play("q1", 0, "correct", 1.0, 2))
    at = open_page(None)
    by_id = at.dataframe[0].value.set_index("id")
    assert by_id.loc[served, "episodes"] == "1"
    assert pd.isna(by_id.loc[served, "progress"])
    assert by_id.loc[labelled.running, "episodes"] == "1/10"
    # Its policy is the server, not a model: the model column says it does not know.
    assert by_id.loc[served, "model"] == "-"
    assert [p.proto.text for p in at.get("progress")] == ["ckpt-3000: running, 1/10 episodes"]
    assert "served: running, 1 episode (an env-server run: episodes come as clients play them)" \
        in [m.value.replace("\\", "") for m in at.markdown]  # fmt: skip


def test_runs_that_name_no_dataset_are_no_candidates_for_the_best(
    store_env: FixtureStore,
) -> None:
    from app.dashboard.analysis import best_runs

    store = Store(store_env.url)
    runs = {r.id: r for r in store.list_runs()}
    a, b = runs[store_env.run_a], runs[store_env.run_b]
    assert best_runs([a, b]) == {b.id}
    # Two imports without --questions: their questions are each their own, not one dataset.
    imported = [replace(r, dataset="", kind="import") for r in (a, b)]
    assert best_runs(imported) == set()


def test_a_followed_import_shows_a_count_not_a_full_bar(empty_store: str, tmp_path: Path) -> None:
    # A trainer still writing step files has no end in view: the import's count so far is no
    # plan, so no "240/240" at 100%.
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions
    from tests.app.importers.writers import sql_prompt, sql_response, verl_dump

    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(tmp_path / "dump", 1, [sql_prompt("Q?")] * 4, [output] * 4, [""] * 4, [1.0] * 4, {})
    store = Store(empty_store)
    importer = Importer(store, format_of(tmp_path / "dump", "verl"),
                        ImportOptions(path=tmp_path / "dump", name="live"))  # fmt: skip
    importer.open()
    for f in importer.files():
        importer.import_file(f)  # following: the run stays running
    store.close()
    at = open_page(None)
    assert not at.get("progress")
    assert "live: running, 4 episodes (an import: episodes come as the trainer writes files)" in (
        texts(at).replace("\\", "")
    )
    table = at.dataframe[0].value
    assert table.loc[table["run"] == "live", "progress"].isna().all()


def test_episode_counts_read_with_thousands_separators() -> None:
    def run(finished: int, planned: int) -> RunSummary:
        return RunSummary(
            id=1, name="r", status="running", policy="p", checkpoint=None,
            checkpoint_fingerprint=None, dataset="d", created_at=datetime.now(UTC),
            started_at=None, ended_at=None, heartbeat_at=None, episodes_planned=planned,
            episodes_finished=finished, correct=0, accuracy=None, mean_reward=None,
            mean_steps=None, parse_failure_rate=None, error=None,
        )  # fmt: skip

    assert episodes_text(run(1_003_520, 2_000_000)) == "1,003,520/2,000,000"
    assert episodes_text(run(12, 40)) == "12/40"


def test_the_table_counts_the_lines_an_import_skipped(empty_store: str, tmp_path: Path) -> None:
    from tests.app.importers.conftest import run_import
    from tests.app.importers.writers import sql_prompt, sql_response, verl_dump

    output = sql_response([("<solution>SELECT 1</solution>", None)])
    step_file = verl_dump(tmp_path / "dump", 1, [sql_prompt("Q?")] * 2, [output] * 2,
                          [""] * 2, [1.0] * 2, {})  # fmt: skip
    step_file.write_text("[1]\n{bad\n" + step_file.read_text())
    store = Store(empty_store)
    run_import(store, tmp_path / "dump", name="imported")
    run_id = store.create_run(spec("played"), episodes_planned=1)
    store.sink(run_id).write(play("q1", 0, "correct", 1.0, 2))
    store.close()
    table = open_page(None).dataframe[0].value.set_index("run")
    assert table.loc["imported", "skipped lines"] == "2"
    assert table.loc["imported", "source"] == "verl: …/" + "/".join((tmp_path / "dump").parts[-2:])
    # A run that read no files has no count, not a zero.
    assert table.loc["played", "skipped lines"] == "-"
    # Selected, the runs show their whole source path.
    details = open_page(None, run="1,2").dataframe[1].value.set_index("run")
    assert details.loc["imported #1", "source"] == f"verl: {tmp_path / 'dump'}"
    assert details.loc["played #2", "source"] == "rollscope"


def test_a_run_whose_mean_reward_is_not_a_number_is_named_above_the_charts(
    empty_store: str,
) -> None:
    # Rewards summed past a float's range: the chart drew no bar for it, and said nothing.
    from app.recorder import Recorder

    turns = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER 1"}]
    store = Store(empty_store)
    with Recorder(store, run="huge*r", kind="training") as rec:
        for step in range(3):
            for reward in (1.5e308, 1e308):
                rec.episode(question="Q?", turns=turns, reward=reward, step=step)
    store.close()
    at = open_page(None)
    said = "Mean episode reward leaves out, as not a finite number: huge\\*r \\(\\#1\\): inf."
    assert said in [c.value for c in at.caption]
