"""Compare says whose reward each run's mean reward is, where a run rollscope played meets one
it did not: the same training, recorded and imported from the trainer's log, scores the same
answers with the environment's shaping on one side and the trainer's reward on the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support import records
from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.dashboard_stores import episode_batch

OWN_REWARD = "Mean reward is each run's own: rollscope's environment's for a run it played"


def _run(store: Store, name: str, batches: list[object], source_format: str | None) -> int:
    spec = records.spec(name, kind="import" if source_format else "batch")
    run_id = store.create_run(spec, episodes_planned=len(batches), source_format=source_format)
    sink = store.sink(run_id)
    for batch in batches:
        sink.write(batch)  # type: ignore[arg-type]
    store.set_run_status(run_id, "completed")
    return run_id


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    """Two runs rollscope played and one imported from a trainer's log, on the same questions."""
    _, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(str(tmp_path / "store.db"))

    def batches() -> list[object]:
        return [episode_batch(db_dir, q, text, gold, correct=True) for q, text, gold in QUESTIONS]

    played = _run(store, "recorded", batches(), None)
    again = _run(store, "recorded-again", batches(), None)
    imported = _run(store, "trl-log", batches(), "trl")
    store.close()
    serve_env(monkeypatch, str(tmp_path / "store.db"))
    return played, again, imported


def test_a_played_run_beside_an_imported_one_says_whose_reward_is_shown(
    runs: tuple[int, int, int],
) -> None:
    played, again, imported = runs
    mixed = open_page("compare/page.py", run=[str(played), str(imported)])
    assert OWN_REWARD in texts(mixed)
    alike = open_page("compare/page.py", run=[str(played), str(again)])
    assert OWN_REWARD not in texts(alike)
