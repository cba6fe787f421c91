"""Compare beside an imported run: one accuracy difference over the shared questions, one
definition of "the runs differ", the gold result from whichever run holds its database, the
shared questions first, and a line where no confidence chart can be drawn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support import records
from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.dashboard_stores import episode_batch
from tests.support.stores import write_run

# question -> (samples, correct ones) of the imported run; ckpt plays each once.
IMPORTED = {"q-count": (4, 1), "q-france": (4, 3), "q-oldest": (2, 0), "q-empty": (4, 4)}
CKPT_RIGHT = {"q-count": True, "q-france": True, "q-oldest": False, "q-avg": False, "q-join": True}


@dataclass(frozen=True)
class MixedStore:
    """An imported run without databases beside a rollscope run on the same questions."""

    url: str
    imported: int
    """db_dir "": q-count 1/4, q-france 3/4, q-oldest 0/2, q-empty 4/4 (its own)."""
    ckpt: int
    """Records its db_dir: right on q-count, q-france, q-join; wrong on q-oldest, q-avg."""
    imported_2: int
    """db_dir "": q-count only, right."""


def _build(root: Path) -> MixedStore:
    questions, db_dir = make_benchmark(root / "bench")
    text = {q: (t, gold) for q, t, gold in QUESTIONS}
    store = Store(str(root / "mixed.db"))

    def imported(name: str, plays: dict[str, tuple[int, int]]) -> int:
        batches = [
            episode_batch(db_dir, q, *text[q], correct=s < right, sample=s)
            for q, (n, right) in plays.items()
            for s in range(n)
        ]
        spec = records.spec(name, kind="import", questions_path="", db_dir="", dataset="x")
        return write_run(store, spec, batches)

    ckpt_spec = records.spec("ckpt", questions_path=str(questions), db_dir=str(db_dir))
    ckpt = write_run(
        store,
        ckpt_spec,
        [episode_batch(db_dir, q, *text[q], correct=ok) for q, ok in CKPT_RIGHT.items()],
    )
    made = MixedStore(
        url=str(root / "mixed.db"),
        imported=imported("imported", IMPORTED),
        ckpt=ckpt,
        imported_2=imported("imported-2", {"q-count": (1, 1)}),
    )
    store.close()
    return made


@pytest.fixture(scope="module")
def mixed_store(tmp_path_factory: pytest.TempPathFactory) -> MixedStore:
    return _build(tmp_path_factory.mktemp("mixed"))


@pytest.fixture
def mixed(mixed_store: MixedStore, monkeypatch: pytest.MonkeyPatch) -> MixedStore:
    serve_env(monkeypatch, mixed_store.url)
    return mixed_store


def _open(*run_ids: int, question: str | None = None) -> AppTest:
    query: dict[str, str | list[str]] = {"run": [str(i) for i in run_ids]}
    if question is not None:
        query["question"] = question
    return open_page("compare/page.py", **query)


def test_one_accuracy_difference_over_the_shared_questions(mixed: MixedStore) -> None:
    # Shared: q-count, q-france, q-oldest. Per question the imported run solves 1/4, 3/4,
    # 0/2 (mean 33.3%; pooled over its 10 episodes 40.0%), ckpt 1, 1, 0 (66.7%).
    at = _open(mixed.imported, mixed.ckpt)
    accuracy = [(m.value, m.delta or "") for m in at.metric if m.label.startswith("accuracy")]
    # Each card over the shared questions, the baseline's too (not its whole run, 57.1%).
    assert accuracy == [("33.3%", ""), ("66.7%", "+33.3 pts")]
    shown = texts(at).replace("\\", "")
    assert "**+33.3 pts** over the 3 questions both played" in shown  # the same estimate
    assert "+26.7 pts" not in shown  # the pooled difference is not a second estimate
    assert "3 questions" in shown and "57.1%" in shown  # the whole run, said as such


def test_the_runs_differ_where_the_outcome_matrix_says_so(mixed: MixedStore) -> None:
    # q-france: 3/4 against 1/1 is "both right" in the matrix, so not a difference.
    at = _open(mixed.imported, mixed.ckpt)
    grid = at.dataframe[0].value
    assert grid.to_numpy().tolist() == [[1, 1], [0, 1]]  # ckpt right/wrong x imported
    picker = at.selectbox(key="cmp_question")
    marked = {o.split(" · ")[0].removeprefix("≠ ") for o in picker.options if o.startswith("≠")}
    assert marked == {"q-count"}
    assert "1 of the 3 shared questions" in picker.label
    assert picker.value == "q-count"
    legend = picker.label + texts(at)
    assert "half or more" in legend


def test_three_runs_list_the_questions_all_played_first(mixed: MixedStore) -> None:
    at = _open(mixed.imported, mixed.ckpt, mixed.imported_2)
    table = at.dataframe[0].value
    assert table["question id"].iloc[0] == "q-count"  # the one question all three played
    # then those two played, before those one played
    assert list(table["question id"].iloc[1:3]) == ["q-france", "q-oldest"]
    options = at.selectbox(key="cmp_question").options
    assert options[0].removeprefix("≠ ").startswith("q-count")
    # imported-2 played q-count alone: its other cells are empty, and the caption says why.
    assert table[f"imported-2 #{mixed.imported_2}"].isna().sum() == len(table) - 1
    assert "A run's cell reads - where it did not play the question." in texts(at)


def test_runs_sharing_other_questions_name_the_baselines_accuracy_on_them(
    mixed: MixedStore,
) -> None:
    # ckpt shares three questions with the baseline, imported-2 one: no one baseline figure.
    at = _open(mixed.imported, mixed.ckpt, mixed.imported_2)
    accuracy = [(m.label, m.value, m.delta or "") for m in at.metric if "accuracy" in m.label]
    assert accuracy == [
        ("accuracy (whole run)", "57.1%", ""),
        ("accuracy (3 shared)", "66.7%", "+33.3 pts"),
        ("accuracy (1 shared)", "100.0%", "+75.0 pts"),
    ]
    shown = texts(at).replace("\\", "")
    assert "imported: 33.3% on the same 3" in shown and "imported: 25.0% on the same 1" in shown


def test_the_gold_result_comes_from_the_run_that_holds_its_database(mixed: MixedStore) -> None:
    at = _open(mixed.imported, mixed.ckpt, question="q-count")
    gold = next(e for e in at.expander if e.label == "Gold SQL and its result")
    assert gold.code[0].value == "SELECT COUNT(*) FROM singer"
    assert len(gold.code) == 2 and "COUNT(*)" in gold.code[1].value  # the result, run now
    assert not at.error


def test_without_any_database_the_gold_result_is_one_plain_line(mixed: MixedStore) -> None:
    at = _open(mixed.imported, mixed.imported_2, question="q-count")
    gold = next(e for e in at.expander if e.label == "Gold SQL and its result")
    assert [c.value for c in gold.code] == ["SELECT COUNT(*) FROM singer"]
    assert not at.error
    line = " ".join(c.value for c in gold.caption)
    assert "hold no database for this question" in line
    assert "rollscope import --questions" in line and "re-run" not in line


def test_a_missing_confidence_chart_is_said_in_one_line(mixed: MixedStore) -> None:
    at = _open(mixed.imported, mixed.ckpt, question="q-count")
    assert not [c for c in at.get("plotly_chart") if "Confidence" in c.proto.spec]
    lines = [c.value for c in at.caption if "Not drawn" in c.value]
    assert len(lines) == 1 and "token log-probabilit" in lines[0]


def test_an_imported_episode_shows_rollscopes_re_grade_beside_the_files_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.importers.conftest import run_import
    from tests.app.importers.writers import sql_prompt, sql_response, verl_dump

    questions, db_dir = make_benchmark(tmp_path / "bench")
    qid, question, gold = QUESTIONS[0]
    # The trainer's reward scored a wrong answer 1.0; run again on the database, it is wrong.
    wrong = sql_response([("<solution>SELECT COUNT(*) FROM singer WHERE 0</solution>", None)])
    verl_dump(tmp_path / "dump", 1, [sql_prompt(question)], [wrong], [gold], [1.0], {})
    store = Store(str(tmp_path / "s.db"))
    imported, _ = run_import(
        store, tmp_path / "dump", "verl", questions=str(questions), db_dir=str(db_dir)
    )
    spec = records.spec("ckpt", questions_path=str(questions), db_dir=str(db_dir))
    ckpt = write_run(store, spec, [episode_batch(db_dir, qid, question, gold, correct=True)])
    store.close()
    serve_env(monkeypatch, str(tmp_path / "s.db"))
    at = _open(imported, ckpt, question=qid)
    heads = [c.value for c in at.caption if c.value.startswith("**correct** · reward ")]
    assert heads == [
        "**correct** · reward 1.000 · 1 step · re-graded by rollscope: **wrong** (the file's "
        "score stands)",
        "**correct** · reward 1.100 · 3 steps",  # rollscope's own: its grade is the outcome
    ]
