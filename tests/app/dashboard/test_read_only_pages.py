"""The dashboard reads through a read-only Store; only Launch and cancel open a writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard import data
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from tests.app.dashboard.apptest import MAIN
from tests.support.store_files import files_beside, to_rollback_journal
from tests.support.stores import fill_store


def test_every_page_leaves_the_store_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    run_id, episode_ids = fill_store(str(path))
    to_rollback_journal(path)  # so that any write at all, even a -wal or -shm, shows
    monkeypatch.setenv(ENV_STORE, str(path))
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    before = files_beside(path)
    pages: list[tuple[str | None, dict[str, str | list[str]]]] = [
        (None, {}),
        ("episodes/page.py", {"run": str(run_id)}),
        ("replay/page.py", {"episode": str(episode_ids[0])}),
        ("compare/page.py", {"run": [str(run_id), str(run_id)]}),
        ("launch/page.py", {}),
    ]
    for page, query in pages:
        at = AppTest.from_file(str(MAIN), default_timeout=30).run()
        if page is not None:
            at.switch_page(page)
        for key, value in query.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if page is None:  # the Runs page read the store through the reader
            assert list(at.dataframe[0].value["run"]) == ["run-a"]
    assert files_beside(path) == before
    assert data.get_store(str(path)).read_only


def test_writer_is_refused_on_a_read_only_dashboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    fill_store(str(path))
    monkeypatch.setenv(ENV_STORE, str(path))
    monkeypatch.setenv(ENV_READ_ONLY, "1")
    with pytest.raises(RuntimeError, match="read-only"):
        data.writer()
    monkeypatch.setenv(ENV_READ_ONLY, "0")
    assert not data.writer().read_only
    assert data.store().read_only
