"""Pages on a run another framework wrote (a verl rollout dump, imported): they say what its
numbers are, and show no zeros for what its files do not hold."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    root = tmp_path_factory.mktemp("imported")
    output = sql_response(
        [("<sql>SELECT 1</sql>", "\n1\n"), ("<solution>SELECT 1</solution>", None)]
    )
    for step in (1, 2):
        prompts = [sql_prompt("How many?")] * 2
        verl_dump(root / "dump", step, prompts, [output] * 2, ["SELECT 1"] * 2, [1.0, 0.0], {})
    store = Store(str(root / "store.db"))
    run_id, _ = run_import(store, root / "dump", "verl-grpo")
    store.close()
    return str(root / "store.db"), run_id


def test_training_says_the_reward_is_the_files_own(
    imported: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id = imported
    serve_env(monkeypatch, url)
    shown = texts(open_page("training/page.py", run=str(run_id)))
    assert "Mean episode reward as the trainer's files give it" in shown
    assert "plus shaping" not in shown


def test_replay_shows_no_zero_timings_or_empty_tokens(
    imported: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id = imported
    serve_env(monkeypatch, url)
    with closing(sqlite3.connect(url)) as conn:
        (episode,) = conn.execute(
            "SELECT min(id) FROM episodes WHERE run_id = ?", (run_id,)
        ).fetchone()
    shown = texts(open_page("replay/page.py", episode=str(episode)))
    assert "reward **+0.000**" in shown
    assert "policy 0.00 s" not in shown and "tokens - in" not in shown
