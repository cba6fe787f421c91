"""Bytes a step costs on disk, with whole prompts (schema 0002) and as stored now (each step the
messages its turn added, `storage.prompts`), and what the text search's index adds (`search`:
its tables and index, per step).

Run on request: `pytest tests/benchmarks/bench_store_bytes.py --benchmarks -s`.
Target: a step's bytes (its row and index entries, plus its share of the shared prompt texts)
at most its own raw output + observation + 200 bytes.

Measured on copies after VACUUM, with SQLite's dbstat (pages of each table and index); the
synthetic store is filled at head and downgraded to 0002 for the "before" figure; stores named
in ROLLSCOPE_BENCH_BYTES_STORES (e.g. a demo store at 0002) are copied and upgraded instead.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine

from storage.migrations import alembic_config
from storage.store import Store
from storage.text_search import search_objects
from tests.support.synthetic import fill_synthetic

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(1800)]

EXISTING = [Path(p) for p in os.environ.get("ROLLSCOPE_BENCH_BYTES_STORES", "").split(",") if p]
EPISODES = int(os.environ.get("ROLLSCOPE_BENCH_BYTES_EPISODES", "5000"))
STEP_PARTS = ("steps", "ix_steps_episode_id_step_no", "prompt_texts", "uq_prompt_texts_sha256",
              "sqlite_autoindex_prompt_texts_1")  # fmt: skip


def measure(path: Path) -> dict[str, float]:
    """Per-step figures of a store file (VACUUMed first)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
        pages = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        n, payload, traces = conn.execute(
            "SELECT count(*), sum(length(CAST(raw_output AS BLOB)) "
            "+ length(CAST(observation AS BLOB))), sum(coalesce(length(token_trace), 0)) "
            "FROM steps"
        ).fetchone()
    size = path.stat().st_size
    step_bytes = sum(pages.get(name, 0) for name in STEP_PARTS)
    search_bytes = sum(size for name, size in pages.items() if name in search_objects())
    return {
        "revision": float(revision),
        "steps": n,
        "file": size / n,
        "step": step_bytes / n,
        "traces": (traces or 0) / n,
        "search": search_bytes / n,
        "raw+obs": payload / n,
        "file_mb": size / 2**20,
    }


def _downgraded(path: Path, target: Path) -> Path:
    shutil.copy2(path, target)
    engine = create_engine(f"sqlite:///{target}")
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0002")
    finally:
        engine.dispose()
    return target


def _upgraded(path: Path, target: Path) -> Path:
    shutil.copy2(path, target)
    Store(str(target)).close()
    return target


def _row(name: str, m: dict[str, float]) -> str:
    budget = m["raw+obs"] + 200
    flag = "" if m["step"] - m["traces"] <= budget else "  OVER"
    return (f"{name:34} {m['revision']:>4.0f} {m['steps']:>8.0f} {m['file_mb']:>8.1f} "
            f"{m['file']:>8.0f} {m['step']:>8.0f} {m['traces']:>7.0f} {m['search']:>7.0f} "
            f"{m['raw+obs']:>8.0f} {budget:>7.0f}{flag}")  # fmt: skip


def test_bytes_per_step(tmp_path: Path) -> None:
    rows = []
    for label, chars in (
        ("synthetic, runner system prompt", None),
        ("synthetic, 2 kB system", 2000),
    ):
        path = tmp_path / f"synthetic-{chars}.db"
        store = Store(str(path))
        fill_synthetic(store, runs=1, episodes_per_run=EPISODES, system_prompt_chars=chars)
        store.close()
        rows.append((f"{label} (whole prompts)", measure(_downgraded(path, tmp_path / "old.db"))))
        rows.append((f"{label} (as stored now)", measure(path)))
    for path in EXISTING:
        copy = tmp_path / f"copy-{path.name}"
        shutil.copy2(path, copy)
        rows.append((f"{path.name} as it is", measure(copy)))
        rows.append((f"{path.name} upgraded", measure(_upgraded(copy, tmp_path / "up.db"))))
    print("\nbytes per step after VACUUM (step = its row, its index entry, its share of the "
          "prompt texts; traces = token traces inside it; search = the text search's index; "
          "budget = raw+obs+200)")  # fmt: skip
    print(f"{'store':34} {'rev':>4} {'steps':>8} {'file MB':>8} {'file/st':>8} {'step':>8} "
          f"{'traces':>7} {'search':>7} {'raw+obs':>8} {'budget':>7}")  # fmt: skip
    for name, m in rows:
        print(_row(name, m))
