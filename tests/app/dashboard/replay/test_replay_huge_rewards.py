"""A reward of 1e300 on Replay and in its GRPO group reads as the episode's does
(1.000e+300), never as 300 digits in the step's line."""

from __future__ import annotations

import pytest

from storage.store import Store
from storage.writes import merged
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.records import play, spec
from tests.support.stores import write_run


@pytest.fixture
def served(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = Store(url)
    try:
        samples = [play("q", i, "correct", r, 1) for i, r in enumerate((1e300, -1e300, 0.0))]
        write_run(store, spec("huge", samples=3), [merged(samples)])
    finally:
        store.close()
    serve_env(monkeypatch, url)
    return url


def test_a_huge_step_reward_reads_in_figures(served: str) -> None:
    for page, query in (
        ("replay/page.py", {"episode": "1"}),
        ("groups/page.py", {"run": "1", "question": "q"}),
    ):
        shown = texts(open_page(page, **query))
        assert "+1.000e+300" in shown, page
        assert "0000000000" not in shown, page
