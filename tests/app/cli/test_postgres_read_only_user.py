"""A PostgreSQL user that may only read the store: the commands that read work, the ones that
write are refused in one line with exit 2 and write nothing, and a user that may not even read
is told that, not to check the server's address."""

from __future__ import annotations

import psycopg
import pytest

from storage.store import Store
from tests.support.cli import rollscope
from tests.support.plain_sql import sql_rows
from tests.support.postgres import PgServer
from tests.support.records import play, spec

pytestmark = pytest.mark.postgres


def test_a_user_that_may_only_read_is_refused_writes_in_one_line(
    postgres_server: PgServer,
) -> None:
    with postgres_server.database("ro") as url:
        store = Store(url)
        try:
            run = store.create_run(spec("kept"), episodes_planned=None)
            store.sink(run).write(play("q", 0, "correct", 1.0, 1))
        finally:
            store.close()
        database = url.rsplit("/", 1)[1]
        for role in ("reader_ro", "nobody_ro"):  # the server is this test process's alone
            postgres_server.admin(f"CREATE ROLE {role} LOGIN")
        postgres_server.admin(f"GRANT CONNECT ON DATABASE {database} TO reader_ro, nobody_ro")
        conninfo = f"host=127.0.0.1 port={postgres_server.port} user=postgres dbname={database}"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader_ro")
        reader = url.replace("postgres@", "reader_ro@")
        assert rollscope("runs", "--store", reader).returncode == 0
        writes = (
            ("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1", "--name", "new"),
            ("tag", "1", "wrong-join"),
        )
        for command in writes:
            refused = rollscope(*command, "--store", reader)
            assert refused.returncode == 2, refused.stderr
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1 and "this database user may not write the store" in lines[0]
            assert "Traceback" not in refused.stderr
        assert sql_rows(url, "SELECT name FROM runs") == [("kept",)]
        assert sql_rows(url, "SELECT COUNT(*) FROM annotations") == [(0,)]
        unread = rollscope("runs", "--store", url.replace("postgres@", "nobody_ro@"))
        assert unread.returncode == 2
        assert "may not read the store's tables: grant it SELECT" in unread.stderr
        assert "check that the server is running" not in unread.stderr
