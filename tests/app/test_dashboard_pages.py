"""Each dashboard page rendered by Streamlit's AppTest against a real fixture store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard_store import XSS_OUTPUT, FixtureStore, build_fixture_store

MAIN = Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py"


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> FixtureStore:
    return build_fixture_store(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture
def store_env(fixture_store: FixtureStore, monkeypatch: pytest.MonkeyPatch) -> FixtureStore:
    monkeypatch.setenv(ENV_STORE, fixture_store.url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return fixture_store


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = str(tmp_path / "empty.db")
    Store(url).close()
    monkeypatch.setenv(ENV_STORE, url)
    yield url


def open_page(page: str | None, **query: str | list[str]) -> AppTest:
    """Run the app, switch to a page (path relative to main.py) with query params, run it."""
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    if page is not None:
        at.switch_page(page)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    """Every piece of text the page shows, joined, for 'is it on the page' checks."""
    parts = [
        e.value
        for kind in (
            "markdown",
            "caption",
            "code",
            "info",
            "warning",
            "error",
            "success",
            "subheader",
            "title",
        )
        for e in at.get(kind)
    ]
    parts += [str(m.value) for m in at.metric]
    return "\n".join(str(p) for p in parts)


# -- Runs ----------------------------------------------------------------------------------------


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


def test_runs_on_an_empty_store_says_how_to_record_one(empty_store: str) -> None:
    at = open_page(None)
    assert "No runs yet" in at.info[0].value
    assert "rollscope run" in at.info[0].value


# -- Episodes ------------------------------------------------------------------------------------


def test_episodes_filters_by_run_and_outcome_from_the_url(store_env: FixtureStore) -> None:
    at = open_page("views/episodes.py", run=str(store_env.run_a), outcome="correct")
    table = at.dataframe[0].value
    assert set(table["run"]) == {"ckpt-1000"}
    assert list(table["outcome"]) == ["correct"] * 3
    assert sorted(table["question id"]) == ["q-count", "q-france", "q-oldest"]


def test_episodes_text_search_and_unparsed_filter(store_env: FixtureStore) -> None:
    at = open_page("views/episodes.py", unparsed="1")
    assert list(at.dataframe[0].value["id"]) == [store_env.xss_episode]
    at = open_page("views/episodes.py", q="Peru")
    assert set(at.dataframe[0].value["question id"]) == {"q-empty"}


def test_a_text_search_counts_up_to_the_cap(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.dashboard import data

    store = Store(store_env.url, read_only=True)
    matches = store.list_episodes(EpisodeFilter(text="select"), with_total=True).total
    store.close()
    assert matches is not None and 10 < matches <= 25  # "select" is in every gold SQL
    monkeypatch.setattr(data, "TEXT_COUNT_CAP", 2)
    # More matches than a page of 10: the rest is counted, up to the cap.
    at = open_page("views/episodes.py", q="select", size="10")
    assert len(at.dataframe[0].value) == 10
    assert any(c.value.startswith("Episodes 1-10 of 2+.") for c in at.caption)
    # A first page that holds every match is its own count, exact: no cap applies.
    at = open_page("views/episodes.py", q="select", size="25")
    assert any(c.value.startswith(f"Episodes 1-{matches} of {matches}.") for c in at.caption)


def test_a_text_search_reads_the_newest_episodes_unless_asked_for_all(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.dashboard import episode_query
    from storage import text_search

    # The window bounds the texts the index cannot narrow: here, every text.
    monkeypatch.setattr(text_search, "candidates", lambda *_: None)
    store = Store(store_env.url, read_only=True)
    every = store.list_episodes(EpisodeFilter(text="select"), limit=100).items
    newest = store.list_episodes(EpisodeFilter(), sort="id", descending=True, limit=4).items
    store.close()
    monkeypatch.setattr(episode_query, "TEXT_SEARCH_NEWEST", 4)
    at = open_page("views/episodes.py", q="select", size="50")
    shown = set(at.dataframe[0].value["id"])
    assert shown == {e.id for e in every} & {e.id for e in newest} and 0 < len(shown) <= 4
    window = "(searched the newest 4 episodes; tick **Search all episodes** for older ones)"
    assert any(window in c.value for c in at.caption)
    # Ticking the box searches them all, and the link keeps it.
    at.checkbox(key="ep_text_all").check().run()
    assert at.query_params["qall"] == "1"
    assert set(at.dataframe[0].value["id"]) == {e.id for e in every}
    assert not any("searched the newest" in c.value for c in at.caption)
    # No match in the window: the notice says where it looked.
    at = open_page("views/episodes.py", q="zq-no-such-text")
    assert any(f"No episodes match these filters {window}." in i.value for i in at.info)
    at = open_page("views/episodes.py", q="zq-no-such-text", qall="1")
    assert any(i.value == "No episodes match these filters." for i in at.info)


def test_episodes_pages_forward_and_back_with_a_cursor_stack(store_env: FixtureStore) -> None:
    at = open_page("views/episodes.py", size="10")
    first = list(at.dataframe[0].value["id"])
    assert len(first) == 10
    next_button = next(b for b in at.button if b.label == "Next")
    next_button.click().run()
    second = list(at.dataframe[0].value["id"])
    assert len(second) == 3 and not set(first) & set(second)
    assert "cursor" in at.query_params
    next(b for b in at.button if b.label == "Previous").click().run()
    assert list(at.dataframe[0].value["id"]) == first
    assert "cursor" not in at.query_params


def test_episodes_warns_about_an_unknown_run_id(store_env: FixtureStore) -> None:
    at = open_page("views/episodes.py", run="9999")
    assert "9999" in at.warning[0].value
    assert len(at.dataframe[0].value) == 13


def test_episodes_on_an_empty_store(empty_store: str) -> None:
    at = open_page("views/episodes.py")
    assert "No runs yet" in at.info[0].value


# -- Replay --------------------------------------------------------------------------------------


def test_replay_shows_model_output_literally_never_as_html(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode=str(store_env.xss_episode), step="2")
    assert XSS_OUTPUT in [c.value for c in at.code]
    # Nothing renders it as markdown or HTML.
    assert not any("<script" in m.value for m in at.markdown)
    assert not at.get("html")
    assert "No action line found" in at.warning[0].value


def test_replay_steps_through_the_episode(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode=str(store_env.query_episode))
    assert at.subheader[0].value == "Step 1 of 3: DESCRIBE"
    next(b for b in at.button if b.label == "Next").click().run()
    assert at.subheader[0].value == "Step 2 of 3: QUERY"
    assert at.query_params["step"] == "2"
    assert "SELECT name FROM singer WHERE country = 'France'" in [c.value for c in at.code]
    next(b for b in at.button if b.label == "Last").click().run()
    assert at.subheader[0].value == "Step 3 of 3: ANSWER"
    next(b for b in at.button if b.label == "First").click().run()
    assert at.subheader[0].value == "Step 1 of 3: DESCRIBE"


def test_replay_reruns_a_query_and_reports_it_still_matches(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode=str(store_env.query_episode), step="2")
    next(b for b in at.button if b.label == "Run this query again").click().run()
    assert "Same result as recorded." in [s.value for s in at.success]
    rows = at.dataframe[0].value
    assert list(rows["name"]) == ["Ada", "Cy"]


def test_replay_reveals_the_gold_answer_by_running_the_gold_sql(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode=str(store_env.query_episode))
    assert not at.dataframe
    at.toggle[0].set_value(True).run()
    assert "SELECT name FROM singer WHERE country = 'France'" in [c.value for c in at.code]
    assert list(at.dataframe[0].value["name"]) == ["Ada", "Cy"]


def test_replay_sql_error_is_highlighted_and_escaped(store_env: FixtureStore) -> None:
    # ckpt-1000 got q-avg wrong with a query naming a missing column.
    flt = EpisodeFilter(run_ids=(store_env.run_a,), question_id="q-avg")
    episode = Store(store_env.url).list_episodes(flt).items[0]
    at = open_page("views/replay.py", episode=str(episode.id), step="2")
    # Escaped for markdown: the text shows literally.
    assert r"no such column\: nme" in [e.value for e in at.error]


def test_replay_with_an_unknown_or_missing_episode(store_env: FixtureStore) -> None:
    at = open_page("views/replay.py", episode="424242")
    assert "424242" in at.warning[0].value
    at = open_page("views/replay.py")
    assert "Pick an episode" in at.info[0].value


# -- Compare -------------------------------------------------------------------------------------


def test_compare_two_runs_matrix_interval_and_divergence(store_env: FixtureStore) -> None:
    at = open_page(
        "views/compare.py",
        run=[str(store_env.run_a), str(store_env.run_b)],
        question="q-oldest",
    )
    shown = texts(at)
    assert "+16.7 pts" in shown and "95% CI" in shown
    grid = at.dataframe[0].value
    # Rows: B right / B wrong; columns: A right / A wrong.
    assert list(grid.index) == ["ckpt-2000 right", "ckpt-2000 wrong"]
    assert list(grid.columns) == ["ckpt-1000 right", "ckpt-1000 wrong"]
    assert grid.to_numpy().tolist() == [[2, 2], [1, 1]]
    labels = [e.label for e in at.expander]
    assert "both right: 2" in labels and "only ckpt-1000: 1" in labels
    assert "only ckpt-2000: 2" in labels and "both wrong: 1" in labels
    assert "First divergence at step 2." in [w.value for w in at.warning]


def test_compare_statistics_cover_questions_beyond_the_list_cap(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.dashboard import data

    monkeypatch.setattr(data, "COMPARE_QUESTION_CAP", 2)
    at = open_page("views/compare.py", run=[str(store_env.run_a), str(store_env.run_b)])
    shown = texts(at)
    # the same interval and matrix as with every question listed
    assert "+16.7 pts" in shown
    assert at.dataframe[0].value.to_numpy().tolist() == [[2, 2], [1, 1]]
    assert "The statistics cover all 6 questions" in shown
    listed = sum(len(df.value) for df in at.dataframe[1:] if "question id" in df.value.columns)
    assert listed == 2


def test_compare_needs_two_runs_and_ignores_unknown_ids(store_env: FixtureStore) -> None:
    at = open_page("views/compare.py", run=[str(store_env.run_a), "777"])
    assert "777" in at.warning[0].value
    assert "Choose two or more runs." in [i.value for i in at.info]


def test_compare_three_runs_shows_the_per_question_table(store_env: FixtureStore) -> None:
    ids = [str(store_env.run_a), str(store_env.run_b), str(store_env.running)]
    at = open_page("views/compare.py", run=ids)
    table = at.dataframe[0].value
    names = {f"ckpt-1000 #{store_env.run_a}", f"ckpt-2000 #{store_env.run_b}"}
    assert names | {f"ckpt-3000 #{store_env.running}"} <= set(table.columns)
    assert len(table) == 6


def test_compare_on_an_empty_store(empty_store: str) -> None:
    at = open_page("views/compare.py")
    assert "two runs" in at.info[0].value


# -- Launch --------------------------------------------------------------------------------------


def test_launch_rejects_bad_input_with_clear_errors(
    store_env: FixtureStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CHECKPOINT_ROOTS, str(tmp_path / "models"))
    at = open_page("views/launch.py")
    at.form_submit_button[0].click().run()
    assert "run name is empty" in texts(at)
    at.selectbox(key="ln_policy").set_value("other checkpoint directory...")
    at.text_input(key="ln_checkpoint").set_value("/etc")
    at.text_input(key="ln_run_name").set_value("try-1")
    at.form_submit_button[0].click().run()
    assert "outside the checkpoint roots" in texts(at)
    assert "Not launched: 1 field to fix" in at.error[0].value


def test_launch_is_hidden_in_read_only_mode(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_READ_ONLY, "1")
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    with pytest.raises(ValueError, match="navigation page"):
        at.switch_page("views/launch.py")
