"""Helpers of the robustness tests: file snapshots, memory, store contents (the CLI is run
with `tests.support.cli`)."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


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
