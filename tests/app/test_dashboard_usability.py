"""The pages after the new-user walk-through (issue 12), through AppTest on real stores:
Compare on shared questions only, a notice for every bad link parameter, the Runs table's
order and marks, Replay's single error and rerun rule, Launch's per-field reasons."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.dashboard import launch
from app.dashboard.components import charts
from app.dashboard.components.run_table import short_path
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_DATASET_ROOTS, ENV_READ_ONLY, ENV_STORE
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard_store import (
    ComparisonStore,
    FixtureStore,
    build_comparison_store,
    build_fixture_store,
)
from tests.app.test_dashboard_pages import open_page, texts


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> FixtureStore:
    return build_fixture_store(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> ComparisonStore:
    return build_comparison_store(tmp_path_factory.mktemp("comparison"))


@pytest.fixture
def store_env(fixture_store: FixtureStore, monkeypatch: pytest.MonkeyPatch) -> FixtureStore:
    monkeypatch.setenv(ENV_STORE, fixture_store.url)
    for name in (ENV_READ_ONLY, ENV_CHECKPOINT_ROOTS, ENV_DATASET_ROOTS):
        monkeypatch.delenv(name, raising=False)
    return fixture_store


@pytest.fixture
def compare_env(comparison: ComparisonStore, monkeypatch: pytest.MonkeyPatch) -> ComparisonStore:
    monkeypatch.setenv(ENV_STORE, comparison.url)
    for name in (ENV_READ_ONLY, ENV_CHECKPOINT_ROOTS, ENV_DATASET_ROOTS):
        monkeypatch.delenv(name, raising=False)
    return comparison


def _metric_deltas(at: object) -> dict[str, list[str]]:
    """Label -> shown deltas; AppTest reads a metric without a delta as ''."""
    out: dict[str, list[str]] = {}
    for m in at.metric:  # type: ignore[attr-defined]
        out.setdefault(m.label, []).append(m.delta or "")
    return out


# -- bug 2: Compare counts shared questions only -------------------------------------------------


def test_compare_runs_sharing_no_questions_show_no_delta(compare_env: ComparisonStore) -> None:
    at = open_page("views/compare.py", run=[str(compare_env.train), str(compare_env.heldout)])
    shown = texts(at)
    assert "train and heldout share no questions: no accuracy difference to show." in shown
    assert "shares no questions with the baseline: no deltas" in shown
    assert _metric_deltas(at) and all(d == "" for ds in _metric_deltas(at).values() for d in ds)
    assert "95% CI" not in shown
    assert not any(df.value.shape == (2, 2) for df in at.dataframe)  # no outcome matrix
    # The side by side of a question one run played says so; it compares nothing.
    assert "All trajectories take the same actions." not in shown
    assert "Only " in shown and "nothing to compare it with" in shown


def test_compare_deltas_count_the_questions_shared_with_the_baseline(
    compare_env: ComparisonStore,
) -> None:
    ids = [compare_env.train, compare_env.heldout, compare_env.everything]
    at = open_page("views/compare.py", run=[str(i) for i in ids])
    metrics = {(m.label, m.value): m.delta for m in at.metric}
    # `everything` on train's three questions: right on one of three, train on all three.
    assert metrics[("accuracy (3 shared)", "33.3%")] == "-66.7 pts"
    shown = texts(at)
    assert "paired bootstrap over the 3 questions both played" in shown
    assert "train and heldout share no questions" in shown
    # Whole-run reward and steps over other questions are no delta.
    assert not metrics[("mean reward", "0.367")]


def test_compare_defaults_to_the_first_question_where_the_runs_differ(
    store_env: FixtureStore,
) -> None:
    at = open_page("views/compare.py", run=[str(store_env.run_a), str(store_env.run_b)])
    picker = at.selectbox(key="cmp_question")
    # ckpt-1000 and ckpt-2000 agree on q-count and q-france, not on q-oldest, q-avg, q-join.
    differing = {"q-oldest", "q-avg", "q-join"}
    assert picker.value in differing
    marked = {o.split(" · ")[0].removeprefix("≠ ") for o in picker.options if o.startswith("≠")}
    assert marked == differing
    assert "3 of 6 questions" in picker.label


def test_compare_keeps_each_runs_sample_in_the_url(compare_env: ComparisonStore) -> None:
    a, b = compare_env.sampled_a, compare_env.sampled_b
    at = open_page("views/compare.py", run=[str(a), str(b)], question="q-count", sample=[f"{a}:1"])
    assert at.selectbox(key=f"cmp_sample_{a}").value == 1
    assert at.selectbox(key=f"cmp_sample_{b}").value == 0
    at.selectbox(key=f"cmp_sample_{b}").set_value(1).run()
    assert sorted(at.query_params["sample"]) == sorted([f"{a}:1", f"{b}:1"])
    at = open_page("views/compare.py", run=[str(a), str(b)], question="q-count", sample="x:9")
    assert at.selectbox(key=f"cmp_sample_{a}").value == 0


# -- bug 4: every bad parameter gets a notice ----------------------------------------------------


@pytest.mark.parametrize(
    ("page", "query", "notice"),
    [
        ("views/episodes.py", {"run": "abc"}, "run='abc' in the link is not a run id"),
        ("views/episodes.py", {"sort": "bogus"}, "sort='bogus' in the link is not a sort order"),
        ("views/episodes.py", {"size": "7"}, "size='7' in the link is not a page size"),
        ("views/episodes.py", {"cursor": "xyz"}, "page cursor is not valid here"),
        ("views/episodes.py", {"rmin": "lots"}, "rmin='lots' in the link is not a number"),
        ("views/episodes.py", {"outcome": "great"}, "outcome='great' in the link is not"),
        ("views/replay.py", {"episode": "abc"}, "episode='abc' in the link is not an episode"),
        ("views/replay.py", {"episode": "1", "step": "99"}, "step='99' in the link is not a step"),
        ("views/compare.py", {"run": ["1", "2"], "question": "nope"}, "question='nope'"),
        (None, {"run": "abc"}, "run='abc' in the link is not a run id"),
    ],
)
def test_a_bad_link_parameter_gets_a_notice_and_a_default(
    store_env: FixtureStore, page: str | None, query: dict[str, str | list[str]], notice: str
) -> None:
    at = open_page(page, **query)  # open_page fails on any exception
    assert any(notice in w.value.replace("\\", "") for w in at.warning), [
        w.value for w in at.warning
    ]


def test_episodes_fall_back_to_the_first_page_and_all_runs(store_env: FixtureStore) -> None:
    at = open_page("views/episodes.py", run="abc", cursor="xyz", sort="bogus", size="7")
    assert len(at.dataframe[0].value) == 13
    assert at.selectbox(key="ep_sort").value == "id"
    assert at.selectbox(key="ep_size").value == 50


# -- item 5: what a user compares first ----------------------------------------------------------


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


def test_episodes_table_shows_outcome_reward_and_steps_before_the_text(
    store_env: FixtureStore,
) -> None:
    at = open_page("views/episodes.py", run=str(store_env.run_a))
    columns = list(at.dataframe[0].value.columns)
    assert columns.index("outcome") < columns.index("question")
    assert columns[:5] == ["open", "run", "outcome", "reward", "steps"]


# -- item 7: errors once, the rerun button only for a query ----------------------------------------


def test_replay_shows_an_error_once(store_env: FixtureStore) -> None:
    flt = EpisodeFilter(run_ids=(store_env.run_a,), question_id="q-avg")
    episode = Store(store_env.url).list_episodes(flt).items[0]
    at = open_page("views/replay.py", episode=str(episode.id), step="2")
    shown = r"no such column\: nme"
    # once in the step view, once in the folded transcript; never again as a code block
    transcript = next(e for e in at.expander if e.label == "Full transcript")
    assert [e.value for e in transcript.error] == [shown]
    assert [e.value for e in at.error] == [shown, shown]
    assert not any("no such column" in c.value for c in at.code)


def test_replay_offers_a_rerun_only_for_a_parsed_query(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode=str(store_env.xss_episode), step="2")
    assert at.subheader[0].value == "Step 2 of 3: QUERY"
    assert "Run this query again" not in [b.label for b in at.button]
    at = open_page("views/replay.py", episode=str(store_env.query_episode), step="2")
    assert "Run this query again" in [b.label for b in at.button]


# -- item 8: charts and links follow the selection -------------------------------------------------


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


# -- item 9: Launch says why under the field -----------------------------------------------------


def test_launch_reports_each_field_under_it(
    store_env: FixtureStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page("views/launch.py")
    at.number_input(key="ln_step_budget").set_value(99)
    at.number_input(key="ln_samples").set_value(0)
    at.text_input(key="ln_checkpoint").set_value("hf:/models/x")
    at.text_input(key="ln_dataset").set_value("/etc/passwd")
    at.text_input(key="ln_run_name").set_value("bad")
    at.form_submit_button[0].click().run()
    shown = texts(at)
    assert "step budget must be between 1 and 50, got 99" in shown
    assert "samples must be between 1 and 64, got 0" in shown
    assert "oracle takes no checkpoint directory" in shown
    assert "no dataset roots configured" in shown
    assert "Not launched: 4 fields to fix" in at.error[0].value
    assert Store(store_env.url).find_run("bad") is None


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


# -- item 9: the checkpoint and dataset fields ---------------------------------------------------


def test_a_pasted_hf_policy_string_is_a_checkpoint_directory(tmp_path: Path) -> None:
    ckpt = tmp_path / "models" / "run1" / "checkpoint-1000"
    assert launch.form_policy(launch.OTHER_CHECKPOINT, f" 'hf:{ckpt}' ") == f"hf:{ckpt}"
    assert launch.form_policy(launch.OTHER_CHECKPOINT, str(ckpt)) == f"hf:{ckpt}"
    with pytest.raises(launch.LaunchError, match="oracle takes no checkpoint directory"):
        launch.form_policy("oracle", f"hf:{ckpt}")
    assert launch.form_policy("oracle", "  ") == "oracle"


def test_a_dataset_must_lie_under_a_dataset_root(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    inside = root / "questions.json"
    assert launch.resolve_dataset(str(inside), [root]) == str(inside.resolve())
    assert launch.resolve_dataset("demo:test", []) == "demo:test"
    with pytest.raises(launch.LaunchError, match="outside the dataset roots"):
        launch.resolve_dataset("/etc/passwd", [root])
    with pytest.raises(launch.LaunchError, match="outside the dataset roots"):
        launch.resolve_dataset(str(root / ".." / "elsewhere.json"), [root])
    with pytest.raises(launch.LaunchError, match="no dataset roots configured"):
        launch.resolve_dataset("/etc/passwd", [])


def test_reward_and_steps_charts_hold_twenty_runs(store_env: FixtureStore) -> None:
    store = Store(store_env.url)
    run = next(r for r in store.list_runs() if r.id == store_env.run_a)
    dist = next(d for d in store.run_distributions([run.id]) if d.run_id == run.id)
    runs = {i: replace(run, id=i, name=f"run-{i}") for i in range(1, 21)}
    dists = [replace(dist, run_id=i) for i in runs]
    for fig in (charts.reward_spread(dists, runs), charts.steps_spread(dists, runs)):
        assert [t.type for t in fig.data] == ["box"] * 20  # one row per run, not 20 bar series
        assert len({t.marker.color for t in fig.data}) == 20
        assert fig.layout.height >= 20 * 20  # each run keeps a readable row
