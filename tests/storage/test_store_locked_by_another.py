"""A store another process holds for writing past the busy timeout: the refusal says so, not
that the URL is wrong."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from storage import engine
from storage.engine import StoreError
from storage.store import Store

OLD_STORE = Path(__file__).parent / "data" / "store_0010.db"


def test_a_store_held_by_another_writer_is_said_to_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_S", 1)
    path = tmp_path / "held.db"
    shutil.copy(OLD_STORE, path)  # an old schema: opening it to write migrates it
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as refused:
            Store(f"sqlite:///{path}")
    finally:
        holder.close()
    said = str(refused.value)
    assert "database is locked" in said
    assert "another process holds the store for writing; try again when it is done" in said
    assert "--store" not in said
