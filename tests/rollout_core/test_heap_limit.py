"""The sandbox's memory budget: it bites on a sandboxed statement and nowhere else."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rollout_core.heap_limit import HeapCeiling, heap_ceiling
from rollout_core.sandbox import Sandbox, SandboxLimits, open_readonly, run_select
from rollout_core.schema import describe_table
from storage.store import Store
from tests.conftest import REPO
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec

MiB = 1024 * 1024
# Columns of one 1 MB random blob each: held together in SQLite's registers for the row.
WIDE = "SELECT " + ", ".join(["a"] * 30) + " FROM (SELECT randomblob(1000000) AS a)"


@pytest.fixture
def ceiling() -> HeapCeiling:
    found = heap_ceiling()
    if found is None:  # then test_fallback_* covers the sandbox
        pytest.skip("this interpreter's SQLite functions cannot be reached through ctypes")
    return found


def _plain_limits() -> tuple[int, int]:
    """(hard, soft) heap limits as any connection of the process reads them."""
    plain = sqlite3.connect(":memory:")
    try:
        hard = plain.execute("PRAGMA hard_heap_limit").fetchone()[0]
        soft = plain.execute("PRAGMA soft_heap_limit").fetchone()[0]
        return int(hard), int(soft)
    finally:
        plain.close()


def test_the_budget_refuses_a_statement_that_outgrows_it(db_path: Path) -> None:
    small = SandboxLimits(memory_budget_bytes=16 * MiB, max_result_bytes=64 * MiB)
    large = SandboxLimits(memory_budget_bytes=96 * MiB, max_result_bytes=64 * MiB)
    with Sandbox(small) as sandbox:
        refused = sandbox.run_select(db_path, WIDE)
        assert refused.error is not None and "more than 16 MiB of memory" in refused.error
        assert sandbox.run_select(db_path, "SELECT count(*) FROM singer").rows == [(4,)]
    with Sandbox(large) as sandbox:
        result = sandbox.run_select(db_path, WIDE)
        assert result.error is None and len(result.rows[0]) == 30


def test_limits_are_back_after_each_statement(ceiling: HeapCeiling, db_path: Path) -> None:
    """Setting a hard limit also lowers the soft one: both must come back, not only the hard."""
    plain = sqlite3.connect(":memory:")
    plain.execute(f"PRAGMA soft_heap_limit = {900 * MiB}")
    try:
        with Sandbox(SandboxLimits(memory_budget_bytes=16 * MiB)) as sandbox:
            assert sandbox.run_select(db_path, WIDE).error is not None
            assert sandbox.run_select(db_path, "SELECT 1").rows == [(1,)]
        assert _plain_limits() == (0, 900 * MiB)
    finally:
        plain.execute("PRAGMA soft_heap_limit = 0")
        plain.close()
    assert _plain_limits() == (0, 0)


def test_other_connections_are_not_capped(ceiling: HeapCeiling, db_path: Path) -> None:
    """The store's connections share the process: the budget must not reach them."""
    budget = 16 * MiB
    with Sandbox(SandboxLimits(memory_budget_bytes=budget)) as sandbox:
        assert sandbox.run_select(db_path, WIDE).error is not None
    plain = sqlite3.connect(":memory:")
    try:
        # Four times the budget, in SQLite's heap (randomblob builds it there).
        blob = plain.execute("SELECT randomblob(?)", (4 * budget,)).fetchone()[0]
        assert len(blob) == 4 * budget
    finally:
        plain.close()


def test_overlapping_statements_each_add_their_budget(ceiling: HeapCeiling) -> None:
    """As two threads' statements overlap, the ceiling stands two budgets above the heap."""
    assert ceiling.limits() == (0, 0)
    used = ceiling.memory_used()
    with ceiling.around(64 * MiB):
        first = ceiling.limits()[0]
        assert abs(first - (used + 64 * MiB)) < MiB
        with ceiling.around(32 * MiB):
            assert ceiling.limits()[0] == first + 32 * MiB
        assert ceiling.limits()[0] == first
    assert ceiling.limits() == (0, 0)


def test_concurrent_statements_leave_no_limit_behind(ceiling: HeapCeiling, db_path: Path) -> None:
    slow = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
    queries = {"slow": slow, "wide": WIDE, "count": "SELECT count(*) FROM singer"}
    errors: dict[str, list[str | None]] = {name: [] for name in queries}

    def work() -> None:
        for name, sql in queries.items():
            errors[name].append(sandbox.run_select(db_path, sql).error)

    limits = SandboxLimits(deadline_seconds=0.3, memory_budget_bytes=16 * MiB)
    with Sandbox(limits) as sandbox:
        workers = [threading.Thread(target=work) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    # The budgets of overlapping statements are one shared total (`heap_limit`): while
    # another thread's wide query holds it, a small query may be refused for memory, and for
    # nothing else.
    assert all(e is None or "more than 16 MiB of memory" in e for e in errors["count"])
    # The endless query is always stopped: by its deadline, or (the heap limit being one for
    # the process) by the memory budget while another thread's wide query holds memory.
    stopped = ("deadline", "more than 16 MiB of memory")
    assert all(any(s in (e or "") for s in stopped) for e in errors["slow"]), errors["slow"]
    # Overlapping budgets add up, so a wide query may pass the memory check while others run;
    # the 16 MB result cap (or, on a busy machine, the deadline) then refuses it.
    assert all(e is not None for e in errors["wide"])
    assert _plain_limits() == (0, 0)
    # Nothing is left behind: alone, the small query passes.
    with Sandbox(limits) as sandbox:
        assert sandbox.run_select(db_path, queries["count"]).error is None


def test_fallback_without_ctypes_keeps_the_permanent_limit(db_path: Path) -> None:
    """Where SQLite's C functions are out of reach, bombs are still refused."""
    script = (
        "import sqlite3, sys\n"
        "import rollout_core.sandbox as sandbox\n"
        "sandbox.heap_ceiling = lambda: None\n"
        "conn = sandbox.open_readonly(sys.argv[1])\n"
        "bomb = 'SELECT ' + ', '.join(['a'] * 300) + ' FROM (SELECT zeroblob(999999) AS a)'\n"
        "print(sandbox.run_select(conn, bomb).error)\n"
        "print(sqlite3.connect(':memory:').execute('PRAGMA hard_heap_limit').fetchone()[0])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(db_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    error, hard = done.stdout.strip().splitlines()
    assert "more than 128 MiB of memory" in error
    assert int(hard) == 128 * MiB


def test_open_readonly_sets_no_process_wide_limit(ceiling: HeapCeiling, db_path: Path) -> None:
    conn = open_readonly(db_path)
    try:
        assert _plain_limits() == (0, 0)
        assert run_select(conn, "SELECT count(*) FROM singer").rows == [(4,)]
        assert _plain_limits() == (0, 0)
    finally:
        conn.close()


def _held(ceiling: HeapCeiling, seconds: float) -> threading.Thread:
    """A thread inside a sandboxed statement's ceiling with no budget left for `seconds`, as
    while an agent's query fills its budget: any SQLite allocation elsewhere fails."""
    inside = threading.Event()

    def hold() -> None:
        with ceiling.around(0):
            inside.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(10)
    return thread


def test_a_store_write_waits_for_the_statement_holding_the_heap(
    ceiling: HeapCeiling, tmp_path: Path
) -> None:
    """An environment server writes its sessions' steps while other sessions' queries run."""
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        run = store.create_run(spec("held"), episodes_planned=None)
        thread = _held(ceiling, 0.5)
        try:
            store.sink(run).write(play("q", 0, "correct", 1.0, 3, raw="x" * 100_000))
        finally:
            thread.join()
        rows = "SELECT outcome, (SELECT COUNT(*) FROM steps) FROM episodes"
        assert sql_rows(store.url, rows) == [("correct", 3)]
    finally:
        store.close()


def test_the_environments_own_reads_wait_for_it_too(ceiling: HeapCeiling, db_path: Path) -> None:
    with Sandbox() as sandbox, sandbox.connection(db_path) as conn:
        thread = _held(ceiling, 0.5)
        try:
            described = describe_table(conn, "singer")
        finally:
            thread.join()
    assert described.startswith("table singer (4 rows)")
