"""Helpers of the robustness tests: file snapshots, memory, store contents, the CLI."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> set[str]:
    """Every path under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def rss_kb() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB, from /proc/self/status."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux 4.0+); ignored where not allowed."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


@dataclass(frozen=True)
class DbCopy:
    """A private copy of a real database, laid out as a one-question benchmark."""

    questions: Path
    db_dir: Path
    db_file: Path
    source: str


def rollscope_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "app.cli", *map(str, args)]


def rollscope(
    *args: str | Path, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to the end and capture its output."""
    return subprocess.run(
        rollscope_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env=cli_env(),
    )


def cli_env() -> dict[str, str]:
    """The environment for CLI subprocesses: the repo importable, the test's ROLLSCOPE_HOME."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("ROLLSCOPE_STORE", None)
    return env


def table_counts(db: Path, tables: Sequence[str] = ("runs", "episodes", "steps")) -> dict[str, int]:
    """Row counts of a SQLite store's tables (0 for a missing table)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    try:
        out = {}
        for table in tables:
            try:
                out[table] = int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            except sqlite3.OperationalError:
                out[table] = 0
        return out
    finally:
        conn.close()


def store_digest(db: Path) -> str:
    """A hash of every row of a SQLite store's data tables (planner statistics excluded)."""
    digest = hashlib.sha256()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for table in ("alembic_version", "runs", "episodes", "steps"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                digest.update(repr(row).encode())
    finally:
        conn.close()
    return digest.hexdigest()
