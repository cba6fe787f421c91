"""Four batch jobs write one store at once while a reader pages through it: nothing lost."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.conftest import REPO
from tests.support.cli import cli_env, rollscope_cmd

WRITERS = 4
LIMIT, SAMPLES = 20, 4
PLANNED = LIMIT * SAMPLES
# A page of 50 episodes must come back well within this even while four jobs write (WAL).
MAX_PAGE_SECONDS = 5.0


@dataclass
class ReaderLog:
    pages: int = 0
    rows: int = 0
    worst: float = 0.0
    errors: list[str] = field(default_factory=list)


def _read_until(url: str, stop: threading.Event, log: ReaderLog) -> None:
    """Page through every episode again and again until told to stop: at least once, as the
    writers can all be done before this thread first runs."""
    store = Store(url)
    try:
        while True:
            cursor = None
            while True:
                t0 = time.perf_counter()
                try:
                    page = store.list_episodes(
                        EpisodeFilter(finished_only=False), limit=50, cursor=cursor
                    )
                except Exception as exc:  # recorded, asserted in the test
                    log.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.05)
                    break
                log.worst = max(log.worst, time.perf_counter() - t0)
                log.pages += 1
                log.rows += len(page.items)
                cursor = page.next_cursor
                if cursor is None or stop.is_set():
                    break
            if stop.is_set():
                break
            time.sleep(0.01)
    finally:
        store.close()


def _wait_for_first_run(url: str, deadline_seconds: float) -> None:
    """Poll until one writer has created the store and its first run."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":  # a plain connect would create the file
        url = f"sqlite:///file:{parsed.database}?mode=ro&uri=true"
    engine = create_engine(url)
    deadline = time.monotonic() + deadline_seconds
    try:
        while time.monotonic() < deadline:
            try:
                with engine.connect() as conn:
                    if conn.execute(text("SELECT COUNT(*) FROM runs")).scalar():
                        return
            except Exception:  # not created or not migrated yet
                pass
            time.sleep(0.05)
    finally:
        engine.dispose()
    raise AssertionError(f"no writer created a run in {url} within {deadline_seconds} s")


def _run_writers(url: str) -> tuple[list[subprocess.CompletedProcess[str]], ReaderLog, float]:
    stop, log = threading.Event(), ReaderLog()
    procs = [
        subprocess.Popen(
            rollscope_cmd(
                "run",
                "--policy",
                "random",
                "--dataset",
                "demo",
                "--limit",
                str(LIMIT),
                "--samples",
                str(SAMPLES),
                "--batch-size",
                "4",
                "--quiet",
                "--name",
                f"writer-{i}",
                "--store",
                url,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=cli_env(),
        )
        for i in range(WRITERS)
    ]
    reader = threading.Thread(target=_read_until, args=(url, stop, log), daemon=True)
    t0 = time.perf_counter()
    _wait_for_first_run(url, deadline_seconds=60)  # the reader opens an existing store
    reader.start()
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        stop.set()
        reader.join(timeout=60)
    return results, log, time.perf_counter() - t0


def _check(url: str, results: list[subprocess.CompletedProcess[str]], log: ReaderLog) -> int:
    for res in results:
        assert "locked" not in res.stderr.lower(), res.stderr
        assert res.returncode == 0, res.stderr
    assert not log.errors, log.errors[:3]
    assert log.pages > 0 and log.worst < MAX_PAGE_SECONDS
    engine = create_engine(url)
    total_steps = 0
    try:
        with engine.connect() as conn:
            for i, res in enumerate(results):
                reported = re.search(r"(\d+) episodes in", res.stdout)
                assert reported is not None, res.stdout
                row = conn.execute(
                    text(
                        "SELECT r.status, COUNT(DISTINCT e.id), COUNT(e.outcome),"
                        " COUNT(DISTINCT e.question_id || ':' || e.sample_index)"
                        " FROM runs r JOIN episodes e ON e.run_id = r.id"
                        " WHERE r.name = :n GROUP BY r.status"
                    ),
                    {"n": f"writer-{i}"},
                ).one()
                assert tuple(row) == ("completed", PLANNED, PLANNED, PLANNED)
                assert int(reported.group(1)) == PLANNED
                steps, counted = conn.execute(
                    text(
                        "SELECT (SELECT COUNT(*) FROM steps s JOIN episodes e"
                        "  ON e.id = s.episode_id JOIN runs r ON r.id = e.run_id"
                        "  WHERE r.name = :n),"
                        " (SELECT SUM(e.steps) FROM episodes e JOIN runs r ON r.id = e.run_id"
                        "  WHERE r.name = :n)"
                    ),
                    {"n": f"writer-{i}"},
                ).one()
                assert steps == counted and steps >= PLANNED
                total_steps += steps
    finally:
        engine.dispose()
    return total_steps


def _report(label: str, log: ReaderLog, steps: int, wall: float, capsys: Any) -> None:
    with capsys.disabled():
        print(
            f"\n{label}: {WRITERS} writers x {PLANNED} episodes ({steps} steps) in {wall:.1f} s, "
            f"0 lost; reader {log.pages} pages / {log.rows} rows, worst page {log.worst:.3f} s"
        )


@pytest.mark.slow
def test_four_writers_and_a_reader_on_one_sqlite_store(tmp_path: Any, capsys: Any) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    results, log, wall = _run_writers(url)
    steps = _check(url, results, log)
    _report("sqlite", log, steps, wall, capsys)


@pytest.mark.slow
@pytest.mark.postgres
def test_four_writers_and_a_reader_on_postgresql(pg_store_url: str, capsys: Any) -> None:
    results, log, wall = _run_writers(pg_store_url)
    steps = _check(pg_store_url, results, log)
    _report("postgresql", log, steps, wall, capsys)
