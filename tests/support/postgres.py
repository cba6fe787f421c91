"""A throwaway PostgreSQL server for the store tests: started from the installed binaries on
a loopback port with durability off, one empty database per test."""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port

_DB_NUMBERS = itertools.count(1)
_TEMPLATES: set[int] = set()
"""Ports of the servers whose store template is made."""
_TEMPLATE = "rollscope_store_template"


def find_pg_bin() -> Path | None:
    """The newest PostgreSQL bin directory holding initdb and pg_ctl, if any."""
    candidates = [os.environ.get("ROLLSCOPE_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    if found := shutil.which("initdb"):
        candidates.append(str(Path(found).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    return None


def _version(path: str) -> float:
    try:
        return float(Path(path).parent.name)
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class PgServer:
    """A throwaway PostgreSQL server on a loopback port (trust auth, user `postgres`)."""

    port: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type,unused-ignore]

    @contextmanager
    def database(self, prefix: str) -> Iterator[str]:
        """A new empty database for the block; yields its URL and drops it after."""
        name = f"{prefix}_{os.getpid()}_{next(_DB_NUMBERS)}"
        self.admin(f"CREATE DATABASE {name}")
        try:
            yield self.url(name)
        finally:
            self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    @contextmanager
    def store_database(self, prefix: str) -> Iterator[str]:
        """A new database holding an empty store at the newest schema, copied from a template
        the revisions built once for this server (running them was most of a test's setup)."""
        if self.port not in _TEMPLATES:
            from storage.store import Store

            self.admin(f"CREATE DATABASE {_TEMPLATE}")
            Store(self.url(_TEMPLATE)).close()
            _TEMPLATES.add(self.port)
        name = f"{prefix}_{os.getpid()}_{next(_DB_NUMBERS)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {_TEMPLATE}")
        try:
            yield self.url(name)
        finally:
            self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def running_postgres() -> Iterator[PgServer]:
    """A PostgreSQL server in a temp dir for the block; skips the test when its binaries are
    missing."""
    bindir = find_pg_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL binaries not found (initdb, pg_ctl under /usr/lib/postgresql/*/bin): "
            "apt-get install postgresql to run the PostgreSQL store tests"
        )
    # Not "rollscope-": the hostile-SQL tests fail on any such name new in the temp dir, and
    # another test process may start its server while they run.
    tmp = Path(tempfile.mkdtemp(prefix="test-postgres-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root: run it as the `postgres` system user.
        user = pwd.getpwnam("postgres")
        os.chown(tmp, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log, port = tmp / "data", tmp / "server.log", free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--no-sync", "-E", "UTF8", "--locale=C"],
        check=True, capture_output=True,
    )  # fmt: skip
    # Durability off: the server lives for one test session.
    options = (
        f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off"
    )
    started = subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
         "-w", "-t", "60", "start"],
        capture_output=True, text=True,
    )  # fmt: skip
    if started.returncode != 0:
        log_text = log.read_text() if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{log_text}")
    try:
        yield PgServer(port)
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)
