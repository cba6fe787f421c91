"""The agents a run's imported traces name, read on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from storage.store import Store
from tests.app.importers.conftest import run_import
from tests.app.importers.test_verifiers_traces import _episode, _solver
from tests.app.importers.writers import verifiers_write_episode
from tests.support.records import spec


def test_a_runs_agents_come_in_the_order_its_files_first_name_them(
    store: Store, tmp_path: Path
) -> None:
    def solver(name: str) -> dict[str, object]:
        return _solver(agent={"name": name, "trainable": True})

    lines = [
        _episode([solver("zeta"), solver("alpha")], id="e1"),
        _episode([solver("mu")], id="e2"),
    ]
    for line in lines:
        verifiers_write_episode(tmp_path / "league", line)
    verifiers_write_episode(tmp_path / "solo", _episode([_solver()]))
    league, _ = run_import(store, tmp_path / "league", "league")
    solo, _ = run_import(store, tmp_path / "solo", "solo")
    recorded = store.create_run(spec("played here"), episodes_planned=1)  # no file, no agent
    assert store.run_agents([league, solo, recorded]) == {
        league: ("zeta", "alpha", "mu"),
        solo: ("agent",),
    }
    assert store.run_agents([recorded]) == {}
