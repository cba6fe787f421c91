"""Compare of runs on two Spider-layout files with the same stem and no ids (`dev-0000`... by
position): an id that names another question in each run is left out of the cards, the
interval, the matrix and the side by side, and a warning names it with both questions."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.benchmark import QUESTIONS
from tests.support.same_stem import SPIDER, oracle_runs_of_same_stem

FULL, SWAPPED, ROTATED = 1, 2, 3


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Runs `full` (#1, the file), `swapped` (#2, its first two questions swapped) and
    `rotated` (#3, every question one place on), each a dev.json of its own folder, played by
    the oracle; a question in `swapped` carries markdown, which the page shows as text."""
    root = tmp_path_factory.mktemp("ids-apart")
    marked = {**SPIDER[1], "question": SPIDER[1]["question"] + " **b** [l](x)"}
    files = {
        "full": SPIDER,
        "swapped": [marked, SPIDER[0], *SPIDER[2:]],
        "rotated": SPIDER[1:] + SPIDER[:1],
    }
    return str(oracle_runs_of_same_stem(root, files))


@pytest.fixture
def served(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    serve_env(monkeypatch, store_url)
    return store_url


def _open(*run_ids: int, question: str | None = None) -> AppTest:
    query: dict[str, str | list[str]] = {"run": [str(i) for i in run_ids]}
    if question is not None:
        query["question"] = question
    return open_page("compare/page.py", **query)


def _matrix(at: AppTest) -> pd.DataFrame:
    return next(df.value for df in at.dataframe if df.value.shape == (2, 2))


def test_ids_naming_other_questions_are_left_out_and_named(served: str) -> None:
    at = _open(FULL, SWAPPED)
    accuracy = [(m.value, m.delta or "") for m in at.metric if m.label.startswith("accuracy")]
    assert accuracy == [("100.0%", ""), ("100.0%", "+0.0 pts")]
    assert [m.label for m in at.metric if m.label.startswith("accuracy")][1] == (
        "accuracy (4 shared)"
    )
    assert int(_matrix(at).to_numpy().sum()) == len(QUESTIONS) - 2
    (warning,) = [w.value for w in at.warning if "question ids" in w.value]
    assert warning.replace("\\", "") == (
        "2 question ids name different questions in swapped and full (the first: dev-0000, "
        f"'{QUESTIONS[1][1]} **b** [l](x)' against '{QUESTIONS[0][1]}'): left out; "
        "give the questions ids of their own."
    )
    assert "\\*\\*b\\*\\* \\[l\\]\\(x\\)" in warning  # markdown shown as text
    listed = next(df.value for df in at.dataframe if "question id" in df.value.columns)
    assert list(listed["question id"]) == ["dev-0000", "dev-0001"]
    assert list(listed["full #1"]) == [QUESTIONS[0][1], QUESTIONS[1][1]]


def test_an_id_apart_shows_the_baselines_question_alone(served: str) -> None:
    at = _open(FULL, SWAPPED, question="dev-0000")
    picker = at.selectbox(key="cmp_question")
    assert picker.value == "dev-0000"
    assert "4 shared questions" in picker.label
    assert f"dev-0000 · {QUESTIONS[0][1]}" in picker.options
    # Side by side: the baseline's episode of its question, not the other run's of another.
    markdown = [m.value.replace("\\", "") for m in at.markdown]
    below = markdown[markdown.index(QUESTIONS[0][1]) :]
    assert any("**full** #1" in m for m in below)
    assert not any("**swapped** #2" in m for m in below)


def test_runs_whose_every_shared_id_names_another_question_share_none(served: str) -> None:
    at = _open(FULL, ROTATED)
    shown = texts(at).replace("\\", "")
    assert "shares no questions with the baseline: no deltas" in shown
    assert "full and rotated share no questions" in shown
    assert f"{len(QUESTIONS)} question ids name different questions in rotated and full" in shown
    assert not any(df.value.shape == (2, 2) for df in at.dataframe)  # no matrix to fill
