"""A PostgreSQL store's password is never shown: not in the dashboard's header (a shared,
read-only dashboard is seen by people who must not get the rights to write the store), not
in the export command it offers, not in what `rollscope migrate` prints."""

from __future__ import annotations

import pytest

from app.dashboard.settings import ENV_READ_ONLY
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.support.cli import rollscope
from tests.support.postgres import PgServer
from tests.support.records import play, spec

pytestmark = pytest.mark.postgres

PASSWORD = "s3cret-pw"


def test_the_password_is_hidden_wherever_the_store_is_named(
    postgres_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with postgres_server.database("pw") as url:
        # The test server trusts its loopback clients: the password is carried, not checked.
        with_password = url.replace("postgres@", f"postgres:{PASSWORD}@")
        migrated = rollscope("migrate", "--store", with_password)
        assert migrated.returncode == 0 and "postgres:***@" in migrated.stdout
        store = Store(with_password)
        try:
            run = store.create_run(spec("shared"), episodes_planned=None)
            store.sink(run).write(play("q", 0, "correct", 1.0, 1))
        finally:
            store.close()
        serve_env(monkeypatch, with_password)
        monkeypatch.setenv(ENV_READ_ONLY, "1")
        # Past the download's cap, Episodes' export offers the command with the store in it.
        monkeypatch.setattr("app.dashboard.episodes.export.DOWNLOAD_CAP", 0)
        runs = texts(open_page(None))
        episodes = texts(open_page("episodes/page.py"))
        assert "rollscope export --all --format parquet --store 'postgresql" in episodes
        for shown in (runs, episodes):
            assert "postgres:***@" in shown and PASSWORD not in shown
        assert PASSWORD not in migrated.stdout + migrated.stderr
