"""The question map of runs on two Spider-layout files with the same stem and no ids
(`dev-0000`... by position): a run's results of an id under which it asks another question
than the run before it are a row of their own, paired with no other run's, and a warning
names the ids with both questions."""

from __future__ import annotations

import pytest

from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.benchmark import QUESTIONS
from tests.support.same_stem import SPIDER, oracle_runs_of_same_stem

FULL, SWAPPED = 1, 2


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Runs `full` (#1, the file) and `swapped` (#2, its first two questions swapped)."""
    root = tmp_path_factory.mktemp("map-ids-apart")
    files = {"full": SPIDER, "swapped": [SPIDER[1], SPIDER[0], *SPIDER[2:]]}
    return str(oracle_runs_of_same_stem(root, files))


def test_the_matrix_gives_ids_naming_another_question_rows_of_their_own(store_url: str) -> None:
    store = Store(store_url)
    try:
        matrix = store.outcome_matrix([FULL, SWAPPED])
    finally:
        store.close()
    assert [(a.question_id, a.key, a.against) for a in matrix.apart] == [
        ("dev-0000", SWAPPED, FULL),
        ("dev-0001", SWAPPED, FULL),
    ]
    cells = dict(zip(matrix.question_ids, matrix.episodes, strict=True))
    assert cells["dev-0000"] == cells["dev-0001"] == [1, 0]
    # swapped's own results of them: rows of their own, not lost
    assert cells["dev-0000 · run 2"] == cells["dev-0001 · run 2"] == [0, 1]
    assert matrix.asked == {"dev-0000 · run 2": "dev-0000", "dev-0001 · run 2": "dev-0001"}
    assert cells["dev-0002"] == [1, 1]


def test_the_page_maps_the_shared_questions_and_names_the_ids_apart(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_env(monkeypatch, store_url)
    at = open_page("question_map/page.py", run=[str(FULL), str(SWAPPED)])
    shown = texts(at).replace("\\", "")
    shared = len(QUESTIONS) - 2
    # the two ids' rows of each run are played by one run alone: 4 rows left out of 8
    rows = len(QUESTIONS) + 2
    assert f"{shared} questions every chosen run played (4 of the {rows} left out" in shown
    (warning,) = [w.value.replace("\\", "") for w in at.warning if "question ids" in w.value]
    assert warning.startswith(
        "2 question ids name different questions in swapped and full (the first: dev-0000, "
        f"'{QUESTIONS[1][1]}' against '{QUESTIONS[0][1]}'): each is a row of its own"
    )
    listed = next(df.value for df in at.dataframe if "question id" in df.value.columns)
    assert list(listed["question id"]) == ["dev-0000", "dev-0001"]
