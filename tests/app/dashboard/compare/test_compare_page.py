"""The Compare page through AppTest: shared questions only, the interval, the matrix, the
question picker, each run's sample in the URL."""

from __future__ import annotations

import pytest
import streamlit as st

from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard_store import ComparisonStore, FixtureStore


def _metric_deltas(at: object) -> dict[str, list[str]]:
    """Label -> shown deltas; AppTest reads a metric without a delta as ''."""
    out: dict[str, list[str]] = {}
    for m in at.metric:  # type: ignore[attr-defined]
        out.setdefault(m.label, []).append(m.delta or "")
    return out


def test_compare_two_runs_matrix_interval_and_divergence(store_env: FixtureStore) -> None:
    at = open_page(
        "compare/page.py",
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
    from app.dashboard.compare import reads

    monkeypatch.setattr(reads, "QUESTION_CAP", 2)
    st.cache_data.clear()  # the cap is no argument of the cached read
    at = open_page("compare/page.py", run=[str(store_env.run_a), str(store_env.run_b)])
    shown = texts(at)
    # the same interval and matrix as with every question listed
    assert "+16.7 pts" in shown
    assert at.dataframe[0].value.to_numpy().tolist() == [[2, 2], [1, 1]]
    assert "The statistics cover all 6 questions" in shown
    listed = sum(len(df.value) for df in at.dataframe[1:] if "question id" in df.value.columns)
    assert listed == 2


def test_compare_needs_two_runs_and_ignores_unknown_ids(store_env: FixtureStore) -> None:
    at = open_page("compare/page.py", run=[str(store_env.run_a), "777"])
    assert "777" in at.warning[0].value
    assert "Choose two or more runs." in [i.value for i in at.info]


def test_compare_three_runs_shows_the_per_question_table(store_env: FixtureStore) -> None:
    ids = [str(store_env.run_a), str(store_env.run_b), str(store_env.running)]
    at = open_page("compare/page.py", run=ids)
    table = at.dataframe[0].value
    names = {f"ckpt-1000 #{store_env.run_a}", f"ckpt-2000 #{store_env.run_b}"}
    assert names | {f"ckpt-3000 #{store_env.running}"} <= set(table.columns)
    assert len(table) == 6


def test_compare_on_an_empty_store(empty_store: str) -> None:
    at = open_page("compare/page.py")
    assert "two runs" in at.info[0].value


def test_compare_runs_sharing_no_questions_show_no_delta(compare_env: ComparisonStore) -> None:
    at = open_page("compare/page.py", run=[str(compare_env.train), str(compare_env.heldout)])
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
    at = open_page("compare/page.py", run=[str(i) for i in ids])
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
    at = open_page("compare/page.py", run=[str(store_env.run_a), str(store_env.run_b)])
    picker = at.selectbox(key="cmp_question")
    # ckpt-1000 and ckpt-2000 agree on q-count and q-france, not on q-oldest, q-avg, q-join.
    differing = {"q-oldest", "q-avg", "q-join"}
    assert picker.value in differing
    marked = {o.split(" · ")[0].removeprefix("≠ ") for o in picker.options if o.startswith("≠")}
    assert marked == differing
    assert "3 of 6 questions" in picker.label


def test_compare_keeps_each_runs_sample_in_the_url(compare_env: ComparisonStore) -> None:
    a, b = compare_env.sampled_a, compare_env.sampled_b
    at = open_page("compare/page.py", run=[str(a), str(b)], question="q-count", sample=[f"{a}:1"])
    assert at.selectbox(key=f"cmp_sample_{a}").value == 1
    assert at.selectbox(key=f"cmp_sample_{b}").value == 0
    at.selectbox(key=f"cmp_sample_{b}").set_value(1).run()
    assert sorted(at.query_params["sample"]) == sorted([f"{a}:1", f"{b}:1"])
    at = open_page("compare/page.py", run=[str(a), str(b)], question="q-count", sample="x:9")
    assert at.selectbox(key=f"cmp_sample_{a}").value == 0
