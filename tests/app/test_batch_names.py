"""Runs started without a name on several machines in the same second: rollscope made the
name up, so a taken one gets a number after it rather than refusing the run; a name the user
gave is never changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import batch
from rollout_core.specs import RunRequest
from storage.store import DuplicateRunName, Store


def test_a_made_up_name_taken_meanwhile_is_numbered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every run below starts "in the same second".
    monkeypatch.setattr("rollout_core.specs.time.strftime", lambda _: "20261207-065354")
    store = Store(f"sqlite:///{tmp_path / 'names.db'}")
    try:
        unnamed = RunRequest(policy="oracle", dataset="demo", limit=1)
        made = [batch.start_run(store, unnamed)[1].spec.name for _ in range(3)]
        base = "oracle-demo-20261207-065354"
        assert made == [base, f"{base}-2", f"{base}-3"]
        assert [r.name for r in store.list_runs()] == list(reversed(made))
        with pytest.raises(DuplicateRunName):
            batch.start_run(store, RunRequest(policy="oracle", dataset="demo", name=base))
    finally:
        store.close()
