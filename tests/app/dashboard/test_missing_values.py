"""A table shows a value nobody measured, or none has yet, as "-" (Streamlit draws "None");
a query result's NULL reads NULL, as SQL writes it."""

from __future__ import annotations

from tests.app.dashboard.apptest import open_page
from tests.support.dashboard_stores import FixtureStore


def test_every_table_names_its_missing_values(store_env: FixtureStore) -> None:
    a, b = str(store_env.run_a), str(store_env.run_b)
    pages: list[tuple[str | None, dict[str, str | list[str]]]] = [
        (None, {}),
        ("runs/page.py", {"run": [a, b]}),
        ("episodes/page.py", {"run": a}),
        ("compare/page.py", {"run": [a, b]}),
        ("question_map/page.py", {"run": [a, b]}),
        ("groups/page.py", {"run": a}),
        ("replay/page.py", {"episode": str(store_env.query_episode)}),
    ]
    shown: dict[str, str] = {}
    for page, query in pages:
        at = open_page(page, **query)
        for i, frame in enumerate(at.dataframe):
            shown[f"{page} #{i}"] = frame.proto.placeholder
    assert len(shown) >= 6, shown
    assert {k: v for k, v in shown.items() if v not in ("-", "NULL")} == {}
