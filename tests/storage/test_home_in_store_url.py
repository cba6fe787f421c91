"""`~` in a SQLite URL is the user's home for every command, as in a bare path: a writer
made `sqlite:///~/runs.db` where a reader looked for it in the home folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.store import Store
from tests.support.cli import rollscope


def test_a_url_under_home_names_one_file_for_writers_and_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    url = "sqlite:///~/runs.db"
    played = rollscope(
        "run", "--policy", "oracle", "--dataset", "demo", "--limit", "1", "--name", "here",
        "--store", url, "--quiet", env={"HOME": str(home)},
    )  # fmt: skip
    assert played.returncode == 0, played.stderr
    assert (home / "runs.db").is_file()
    listed = rollscope("runs", "--store", url, env={"HOME": str(home)})
    assert listed.returncode == 0 and "here" in listed.stdout
    store = Store(url)
    try:
        assert [r.name for r in store.list_runs()] == ["here"]
    finally:
        store.close()
