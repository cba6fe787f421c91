"""A store with more runs than the pages list (`data.RUNS_LISTED`, two here): a link names an
older run and every page opens it; Runs says how many more the store holds; Training lists
the newest training runs, whatever the other runs after them."""

from __future__ import annotations

import pytest

from app.dashboard import data
from storage.store import Store
from storage.writes import merged
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.records import play, spec
from tests.support.stores import correct_once_each, write_run

TRAINED, OLD, NEW, NEWER = 1, 2, 3, 4


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`trained` (#1, a training run), `old` (#2), `new` (#3) and `newer` (#4)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('older') / 'runs.db'}"
    store = Store(url)
    try:
        episodes = merged([play("q0", 0, "correct", 1.0, 1), play("q1", 0, "wrong", 0.0, 1)])
        write_run(store, spec("trained", kind="training"), [episodes])
        for name in ("old", "new", "newer"):
            correct_once_each(store, name, range(2 if name == "old" else 3))
    finally:
        store.close()
    return url


@pytest.fixture
def served(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    serve_env(monkeypatch, store_url)
    monkeypatch.setattr(data, "RUNS_LISTED", 2)
    data.list_runs.clear()
    return store_url


def test_compare_opens_an_older_run_from_its_link(served: str) -> None:
    at = open_page("compare/page.py", run=[str(NEWER), str(OLD)])
    shown = texts(at)
    assert "No run with id" not in shown
    assert at.multiselect[0].value == [NEWER, OLD]


def test_episodes_filters_on_an_older_run_from_its_link(served: str) -> None:
    at = open_page("episodes/page.py", run=str(OLD))
    assert "No run with id" not in texts(at)
    table = next(df.value for df in at.dataframe if "question" in df.value.columns)
    assert len(table) == 2  # old's two episodes, not every run's eight


def test_runs_says_the_store_holds_more_than_it_lists(served: str) -> None:
    at = open_page("runs/page.py")
    assert (
        "The newest 2 of the store's 4 runs are listed; open an older one with its id in the "
        "link (`?run=ID`)" in texts(at).replace("\\", "")
    )


def test_training_lists_the_newest_training_runs(served: str) -> None:
    at = open_page("training/page.py")
    assert "No training runs" not in texts(at)
    assert at.selectbox[0].value == TRAINED


def test_replay_keeps_the_list_of_an_older_run_it_came_from(served: str) -> None:
    at = open_page("replay/page.py", episode="3", **{"from": f"run={OLD}&size=10"})
    assert "No run with id" not in texts(at)  # the list keeps its run: Previous/Next within it


def test_export_without_a_run_filter_holds_every_runs_episodes(served: str) -> None:
    # Not the runs the page lists (the newest two here): every run's, as `export --all`.
    import json

    from app.dashboard.episodes.export import _write
    from storage.read_models import EpisodeFilter

    written = _write(served, [], "jsonl", EpisodeFilter(outcomes=("correct",)))
    runs = [json.loads(line)["run_name"] for line in written.decode().splitlines()]
    assert runs == ["trained"] + ["old"] * 2 + ["new"] * 3 + ["newer"] * 3
