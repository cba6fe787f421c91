"""The Episodes page through AppTest: filters, search, paging and the table, from the URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.episodes import query as episode_query
from app.recorder import Recorder
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page
from tests.app.dashboard.conftest import serve_env
from tests.support.dashboard_stores import FixtureStore
from tests.support.long_training import LongTraining


def test_episodes_filters_by_run_and_outcome_from_the_url(store_env: FixtureStore) -> None:
    at = open_page("episodes/page.py", run=str(store_env.run_a), outcome="correct")
    table = at.dataframe[0].value
    assert set(table["run"]) == {"ckpt-1000"}
    assert list(table["outcome"]) == ["correct"] * 3
    assert sorted(table["question id"]) == ["q-count", "q-france", "q-oldest"]


def test_episodes_text_search_and_unparsed_filter(store_env: FixtureStore) -> None:
    at = open_page("episodes/page.py", unparsed="1")
    assert list(at.dataframe[0].value["id"]) == [store_env.xss_episode]
    at = open_page("episodes/page.py", q="Peru")
    assert set(at.dataframe[0].value["question id"]) == {"q-empty"}


def test_a_text_search_counts_up_to_the_cap(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    from app.dashboard.episodes import reads

    store = Store(store_env.url, read_only=True)
    matches = store.list_episodes(EpisodeFilter(text="select"), with_total=True).total
    store.close()
    assert matches is not None and 10 < matches <= 25  # "select" is in every gold SQL
    monkeypatch.setattr(reads, "TEXT_COUNT_CAP", 2)
    # More matches than a page of 10: the rest is counted, up to the cap.
    at = open_page("episodes/page.py", q="select", size="10")
    assert len(at.dataframe[0].value) == 10
    assert any(c.value.startswith("Episodes 1-10 of 2+.") for c in at.caption)
    # A first page that holds every match is its own count, exact: no cap applies.
    at = open_page("episodes/page.py", q="select", size="25")
    assert any(c.value.startswith(f"Episodes 1-{matches} of {matches}.") for c in at.caption)


def test_a_text_search_reads_the_newest_episodes_unless_asked_for_all(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage import text_search

    # The window bounds the texts the index cannot narrow: here, every text.
    monkeypatch.setattr(text_search, "candidates", lambda *_: None)
    store = Store(store_env.url, read_only=True)
    every = store.list_episodes(EpisodeFilter(text="select"), limit=100).items
    newest = store.list_episodes(EpisodeFilter(), sort="id", descending=True, limit=4).items
    store.close()
    monkeypatch.setattr(episode_query, "TEXT_SEARCH_NEWEST", 4)
    at = open_page("episodes/page.py", q="select", size="50")
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
    at = open_page("episodes/page.py", q="zq-no-such-text")
    assert any(f"No episodes match these filters {window}." in i.value for i in at.info)
    at = open_page("episodes/page.py", q="zq-no-such-text", qall="1")
    assert any(i.value == "No episodes match these filters." for i in at.info)


def test_episodes_pages_forward_and_back_with_a_cursor_stack(store_env: FixtureStore) -> None:
    at = open_page("episodes/page.py", size="10")
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
    at = open_page("episodes/page.py", run="9999")
    assert "9999" in at.warning[0].value
    assert len(at.dataframe[0].value) == 13


def test_episodes_on_an_empty_store(empty_store: str) -> None:
    at = open_page("episodes/page.py")
    assert "No runs yet" in at.info[0].value


def test_episodes_fall_back_to_the_first_page_and_all_runs(store_env: FixtureStore) -> None:
    at = open_page("episodes/page.py", run="abc", cursor="xyz", sort="bogus", size="7")
    assert len(at.dataframe[0].value) == 13
    assert at.selectbox(key="ep_sort").value == "id"
    assert at.selectbox(key="ep_size").value == 50


def test_episodes_table_shows_outcome_reward_and_steps_before_the_text(
    store_env: FixtureStore,
) -> None:
    at = open_page("episodes/page.py", run=str(store_env.run_a))
    columns = list(at.dataframe[0].value.columns)
    assert columns.index("outcome") < columns.index("question")
    assert columns[:5] == ["open", "run", "outcome", "reward", "steps"]


def test_episodes_filters_by_tag_from_the_url_and_shows_a_tags_column(
    labelled: FixtureStore,
) -> None:
    store = Store(labelled.url)
    store.annotate(labelled.query_episode, "look-again")
    store.annotate(labelled.xss_episode, "look-again", step=2)
    store.annotate(labelled.xss_episode, "html")
    at = open_page("episodes/page.py", tag="look-again")
    rows = at.dataframe[0].value
    assert sorted(rows["id"]) == sorted([labelled.query_episode, labelled.xss_episode])
    tags = dict(zip(rows["id"], rows["tags"], strict=True))
    assert list(tags[labelled.xss_episode]) == ["html", "look-again"]
    assert at.multiselect(key="ep_tags").value == ["look-again"]
    assert set(at.multiselect(key="ep_tags").options) == {"look-again", "html"}
    # Picking another tag writes the URL, as every filter does.
    at.multiselect(key="ep_tags").set_value(["html"]).run()
    assert at.query_params["tag"] == "html"
    assert list(at.dataframe[0].value["id"]) == [labelled.xss_episode]


def test_the_tag_filter_is_list_state_replay_carries() -> None:
    query, problems = episode_query.from_query_string("run=3&tag=a&tag=b%20c", {3})
    assert problems == [] and query.flt.tags == ("a", "b c")
    assert episode_query.to_query_string(query) == "run=3&tag=a&tag=b+c"


def _column_widths(at: object) -> dict[str, object]:
    """Column name -> the width the page gave it (absent: the grid's own)."""
    config = json.loads(at.dataframe[0].proto.columns)  # type: ignore[attr-defined]
    return {name: c.get("width") for name, c in config.items()}


def test_run_names_questions_and_tags_get_columns_that_hold_them(labelled: FixtureStore) -> None:
    # Issue 31, item 8 and polish: "checkpoint-50…" could be either of two runs; "ook-again".
    Store(labelled.url).annotate(labelled.query_episode, "look-again")
    at = open_page("episodes/page.py", run=str(labelled.run_a))
    rows = at.dataframe[0].value
    widths = _column_widths(at)
    longest_run = max(len(r) for r in rows["run"])
    longest_question = max(len(q) for q in rows["question"])
    assert isinstance(widths["run"], int) and widths["run"] >= 6 * longest_run
    assert isinstance(widths["question"], int) and widths["question"] >= 6 * longest_question
    assert isinstance(widths["tags"], int) and widths["tags"] >= 6 * len("look-again") + 16


def test_a_training_runs_episodes_filter_by_training_step_and_show_it(
    long_training: LongTraining,
) -> None:
    run = str(long_training.run_id)
    at = open_page("episodes/page.py", run=run, tmin="3", tmax="4")
    rows = at.dataframe[0].value
    assert sorted(set(rows["training step"])) == [3, 4]
    assert len(rows) == 12  # six episodes a step
    assert (at.number_input(key="ep_tmin").value, at.number_input(key="ep_tmax").value) == (3, 4)
    at.number_input(key="ep_tmax").set_value(3).run()
    assert at.query_params["tmax"] == "3"
    assert set(at.dataframe[0].value["training step"]) == {3}
    # A bad bound is told and ignored; the Replay list carries the range.
    at = open_page("episodes/page.py", run=run, tmin="x", tmax="1")
    assert "tmin='x' in the link is not a training step" in at.warning[0].value
    assert set(at.dataframe[0].value["training step"]) == {0, 1}
    query, problems = episode_query.from_query_string(f"run={run}&tmin=2&tmax=5", {int(run)})
    assert problems == [] and (query.flt.min_train_step, query.flt.max_train_step) == (2, 5)
    assert episode_query.to_query_string(query) == f"run={run}&tmin=2&tmax=5"


def test_one_training_runs_steps_link_to_their_grpo_groups(long_training: LongTraining) -> None:
    run = str(long_training.run_id)

    def links(at: AppTest) -> list[tuple[str, str]]:
        found = [p.proto for p in at.get("page_link") if "GRPO groups" in p.proto.label]
        return [(p.label, p.query_string) for p in found]

    at = open_page("episodes/page.py", run=run, tmin="3", tmax="4")
    assert links(at) == [("GRPO groups of these training steps", f"run={run}&tmin=3&tmax=4")]
    assert not links(open_page("episodes/page.py", run=run))  # no range
    assert not links(open_page("episodes/page.py", tmin="3"))  # not one run


def test_a_run_without_training_steps_has_no_training_step_column(
    store_env: FixtureStore,
) -> None:
    at = open_page("episodes/page.py", run=str(store_env.run_a))
    assert "training step" not in at.dataframe[0].value.columns


def test_an_empty_list_says_which_filter_leaves_nothing(store_env: FixtureStore) -> None:
    at = open_page("episodes/page.py", rmin="0.5", rmax="0.2", smin="3", smax="1")
    assert at.info[0].value == (
        "No episodes match these filters. **Min reward** 0.5 is above **Max reward** 0.2. "
        "**Min steps** 3 is above **Max steps** 1."
    )
    at = open_page("episodes/page.py", run=str(store_env.run_a), tmin="5", tmax="2")
    assert at.info[0].value == (
        "No episodes match these filters. **From training step** 5 is above **To training "
        "step** 2. A training step range lists a training run's episodes, and the run chosen "
        "is not one."
    )


def test_an_sql_error_filter_over_a_recorded_run_says_it_is_not_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "store.db")
    turns = [{"role": "assistant", "content": "<sql>SELECT 1</sql>"}]
    with Recorder(url, run="looped") as rec:
        rec.episode(question="How many?", turns=turns, reward=0.0)
    serve_env(monkeypatch, url)
    for choice in ("yes", "no"):
        at = open_page("episodes/page.py", run="1", sqlerr=choice)
        assert at.info[0].value == (
            "No episodes match these filters. **SQL error** is not known for the run chosen: "
            "its SQL did not run here."
        )
    assert len(open_page("episodes/page.py", run="1").dataframe[0].value) == 1
