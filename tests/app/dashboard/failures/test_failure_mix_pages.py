"""The failure-class mix on the pages that show it (Runs, Episodes, Compare), rendered by
Streamlit's AppTest against the analysis store."""

from __future__ import annotations

import json

import pytest

from rollout_core.failure_classes import FAILURE_LABELS
from tests.app.dashboard.apptest import open_page
from tests.support.dashboard_stores import AnalysisStore


def test_runs_chart_the_failure_mix(fx: AnalysisStore) -> None:
    at = open_page(None)
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert any('"Failure classes"' in spec for spec in charts)
    assert any(FAILURE_LABELS["wrong_after_gold"] in spec for spec in charts)


def test_episodes_filter_by_failure_class_from_the_url(fx: AnalysisStore) -> None:
    at = open_page("episodes/page.py", run=str(fx.runs["ckpt-100"]), **{"class": "action_loop"})
    table = at.dataframe[0].value
    assert len(table) == 5 and set(table["class"]) == {FAILURE_LABELS["action_loop"]}
    at.multiselect[2].set_value(["unparsed", "sql_errors"]).run()
    assert at.query_params["class"] == ["unparsed", "sql_errors"]
    assert sorted(at.dataframe[0].value["class"]) == sorted(
        [FAILURE_LABELS["unparsed"]] * 2 + [FAILURE_LABELS["sql_errors"]]
    )


def test_compare_shows_how_the_mix_moved_and_each_sides_confidence(fx: AnalysisStore) -> None:
    a, b = fx.runs["ckpt-100"], fx.runs["ckpt-200"]
    at = open_page("compare/page.py", run=[str(a), str(b)], question="q-count")
    shift = next(df.value for df in at.dataframe if "change (points)" in df.value.columns)
    by_class = shift.set_index("class")
    assert by_class.loc["correct", "ckpt-100 episodes"] == 10
    assert by_class.loc["correct", "ckpt-200 episodes"] == 16
    assert by_class.loc["correct", "change (points)"] == pytest.approx(100 * (16 - 10) / 24)
    table = next(df for df in at.dataframe if "change (points)" in df.value.columns)
    columns = json.loads(table.proto.columns).items()
    formats = {n: c.get("type_config", {}).get("format") for n, c in columns}
    assert formats["ckpt-100 episodes"] == formats["ckpt-200 episodes"] == "%,d"  # 1,234
    assert by_class.loc["stuck on SQL errors", "open ckpt-200"] == (
        f"episodes?run={b}&class=sql_errors"
    )
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Confidence per step" in s for s in specs)
