"""Compare's failure classes: over the questions the cards cover, with run names as text cut
as other charts cut them, and a run named twice in the link noted."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.components.colors import plot_label, short_name
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.records import play, spec
from tests.support.stores import write_run

HOSTILE_NAME = "<b>bold</b> " + "L" * 150


@dataclass(frozen=True)
class ClassStore:
    url: str
    base: int
    """One sample each: q1 right, q2 wrong, q3 right, q4 wrong."""
    hostile: int
    """Named HOSTILE_NAME. Two samples of q1 (one right) and of q2 (both right), four wrong
    samples of q5, which the base did not play."""


@pytest.fixture(scope="module")
def class_store(tmp_path_factory: pytest.TempPathFactory) -> ClassStore:
    url = str(tmp_path_factory.mktemp("classes") / "s.db")
    store = Store(url)
    base = write_run(
        store,
        spec("base"),
        [
            play("q1", 0, "correct", 1.0, 2),
            play("q2", 0, "wrong", 0.0, 2),
            play("q3", 0, "correct", 1.0, 2),
            play("q4", 0, "wrong", 0.0, 2),
        ],
    )
    plays = [("q1", 0, True), ("q1", 1, False), ("q2", 0, True), ("q2", 1, True)]
    plays += [("q5", s, False) for s in range(4)]
    hostile = write_run(
        store,
        spec(HOSTILE_NAME, samples=2),
        [play(q, s, "correct" if ok else "wrong", float(ok), 2) for q, s, ok in plays],
    )
    store.close()
    return ClassStore(url, base, hostile)


@pytest.fixture
def classes(class_store: ClassStore, monkeypatch: pytest.MonkeyPatch) -> ClassStore:
    serve_env(monkeypatch, class_store.url)
    return class_store


def _open(*run_ids: int) -> AppTest:
    return open_page("compare/page.py", run=[str(i) for i in run_ids])


def test_failure_classes_count_the_questions_the_cards_cover(classes: ClassStore) -> None:
    # Shared: q1 and q2. Cards: base 50.0% (1 of 2), hostile 75.0% (q1 1/2, q2 2/2). Before,
    # the failure classes counted whole runs: hostile's 3 of 8 right, -12.5 points.
    at = _open(classes.base, classes.hostile)
    accuracy = [(m.value, m.delta or "") for m in at.metric if m.label.startswith("accuracy")]
    assert accuracy == [("50.0%", ""), ("75.0%", "+25.0 pts")]
    shift = next(df.value for df in at.dataframe if "change (points)" in df.value.columns)
    name = short_name(HOSTILE_NAME)
    by_class = shift.set_index("class")
    assert by_class.loc["correct", "base episodes"] == 1
    assert by_class.loc["correct", f"{name} episodes"] == 3
    assert by_class.loc["correct", "change (points)"] == pytest.approx(25.0)
    assert shift["base episodes"].sum() == 2 and shift[f"{name} episodes"].sum() == 4
    shown = texts(at).replace("\\", "")
    assert "Over the 2 questions both played, as the cards above: 2 of base's 4 episodes" in shown


def test_a_run_named_twice_in_the_link_is_noted(classes: ClassStore) -> None:
    # Before: dropped without a word, then "Choose two or more runs".
    at = _open(classes.base, classes.base)
    assert f"run={classes.base} comes more than once in the link; read once" in (
        at.warning[0].value
    )
    assert "Choose two or more runs" in texts(at)


def test_a_run_name_in_the_failure_classes_is_text_cut_as_in_other_charts(
    classes: ClassStore,
) -> None:
    at = _open(classes.base, classes.hostile)
    (bars,) = [c for c in at.get("plotly_chart") if "share of episodes" in c.proto.spec]
    labels = json.loads(bars.proto.spec)["data"][0]["y"]
    # Plotly reads <b> in a label as bold: the name is escaped, and cut to NAME_CHARS.
    assert labels == [plot_label(classes.base, "base"), plot_label(classes.hostile, HOSTILE_NAME)]
    assert "<b>" not in labels[1] and "&lt;b&gt;bold&lt;/b&gt;" in labels[1]
    assert "L" * 40 not in labels[1]
    # Shares and change first, under headers of cut names: an 800 px window shows them.
    shift = next(df.value for df in at.dataframe if "change (points)" in df.value.columns)
    name = short_name(HOSTILE_NAME)
    assert list(shift.columns[:4]) == ["class", "base share", f"{name} share", "change (points)"]
    assert not any(HOSTILE_NAME in c for c in shift.columns)
