"""The store's floor for an import: the rows `rollscope import` writes for `bench_import`'s verl
rollouts, written with the least Python there can be (plain `sqlite3`, the rollouts' layout
known in advance), beside the importer itself on the same files.

What it answers: how much of an episode's cost is the store's own (its rows, indexes and text
index in SQLite) and how much is the importer's reading, records and write path. Not a second
write path: a measurement of the schema. Run on request:
`pytest tests/benchmarks/bench_import_floor.py --benchmarks -s`;
ROLLSCOPE_BENCH_FLOOR_EPISODES (default 20,480) sets the size, 1,003,520 the issue's.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from storage.episode_rows import EPISODE_COLUMNS
from storage.store import Store
from storage.text_search import _INDEX_EPISODES
from storage.writes import STEP_COLUMNS
from tests.benchmarks.bench_import import GROUP, PER_FILE, write_verl
from tests.benchmarks.bench_sink import machine_reference

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(7200)]

EPISODES = int(os.environ.get("ROLLSCOPE_BENCH_FLOOR_EPISODES", str(4 * PER_FILE)))
BATCH = 2000
"""Episodes a statement group, as the importer's batches."""

_OBSERVED = "\nuser\n<observation>"
_REPLIED = "</observation>\nassistant\n"
_EPISODE = (
    f"INSERT INTO episodes (id, {', '.join(EPISODE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * (len(EPISODE_COLUMNS) + 1))})"
)
_STEP = (
    f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) VALUES ({', '.join('?' * len(STEP_COLUMNS))})"
)
_SOURCE = "INSERT INTO episode_sources (episode_id, file_id, line, sha256) VALUES (?, ?, ?, ?)"
_REWARD = "INSERT INTO episode_rewards (episode_id, name, value) VALUES (?, ?, ?)"


def _turns(output: str) -> list[tuple[str, str]]:
    """A verl output of the benchmark's layout as (assistant text, observation) pairs."""
    parts = output.split(_OBSERVED)
    turns = [[parts[0], ""]]
    for part in parts[1:]:
        observation, _, text = part.partition(_REPLIED)
        turns[-1][1] = observation.strip("\n")
        turns.append([text, ""])
    return [(t, o) for t, o in turns]


def _episode_rows(
    eid: int, line: int, raw: bytes, file_id: int, rows: dict[str, list[Any]]
) -> None:
    """One rollout's rows: the episode, its three steps, its source, its named rewards."""
    rollout = orjson.loads(raw)
    asked = rollout["input"].partition("\nuser\n")[2].removesuffix("\nassistant\n")
    question = asked.rpartition(": ")[2]
    turns = _turns(rollout["output"])
    score, last = rollout["score"], len(turns) - 1
    # Each step's prompt as the importer stores it: the system prompt shared (prompt_texts 1),
    # then what each step adds to the one before.
    added = [{"role": "user", "content": asked}]
    answer = ""
    for n, (text, observation) in enumerate(turns):
        final = n == last
        tag = "solution" if final else "sql"
        argument = text.rpartition(f"<{tag}>")[2].partition(f"</{tag}>")[0]
        answer = argument
        rows["steps"].append(
            (eid, n + 1, 1, 1, orjson.dumps(added).decode(), text,
             "ANSWER" if final else "QUERY", argument, 1, observation, None,
             score if final else 0.0, int(final), None, None, None, None, 0, None, None, None,
             None, 0)
        )  # fmt: skip
        added = [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
    correct = score >= 1.0
    rows["episodes"].append(
        (eid, 1, "q-" + hashlib.sha256(asked.encode()).hexdigest()[:12], (eid - 1) % GROUP,
         None, "bench", question, rollout["gts"], None, None, None, rollout["step"],
         (eid - 1) // GROUP, len(turns), 0, 0, 0, last, 1, False, False,
         "correct" if correct else "wrong", score, None, None, answer, None, None,
         "correct" if correct else "wrong_answer", None, None, None, None)
    )  # fmt: skip
    rows["sources"].append((eid, file_id, line, hashlib.sha256(raw).digest()))
    rows["rewards"] += [(eid, k, float(rollout[k])) for k in ("acc", "format_reward", "score")]


def write_floor(source: Path, db: Path) -> float:
    """Write every rollout of `source` into a new store at `db`; the seconds it took."""
    Store(str(db)).close()  # the schema, its indexes and the text index's settings
    with closing(sqlite3.connect(db, isolation_level=None)) as con:
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            con.execute(f"PRAGMA {pragma}")
        con.execute(
            "INSERT INTO runs (id, name, policy, dataset, spec, episodes_planned, status, "
            "created_at, kind) VALUES (1, 'floor', 'import', 'bench', '{}', 0, 'running', "
            "'2026-01-01', 'import')"
        )
        con.execute("INSERT INTO prompt_texts (id, sha256, text) VALUES (1, x'00', '[]')")
        files = sorted(source.glob("*.jsonl"), key=lambda p: int(p.stem))
        eid = 0
        gc.disable()
        start = time.perf_counter()
        try:
            for file_id, path in enumerate(files, start=1):
                con.execute("BEGIN IMMEDIATE")
                con.execute(
                    "INSERT INTO import_files (id, run_id, path, sha256, bytes, rows, "
                    "started_at) VALUES (?, 1, ?, x'00', 0, 0, '2026-01-01')",
                    (file_id, str(path)),
                )
                with path.open("rb") as lines:
                    batch: list[bytes] = []
                    for raw in lines:
                        batch.append(raw)
                        if len(batch) == BATCH:
                            eid = _write(con, batch, eid, file_id)
                            batch = []
                    eid = _write(con, batch, eid, file_id)
                con.execute("COMMIT")
        finally:
            gc.enable()
        return time.perf_counter() - start


def _write(con: sqlite3.Connection, lines: list[bytes], eid: int, file_id: int) -> int:
    """One batch of a file's lines; the last episode id written."""
    rows: dict[str, list[Any]] = {"episodes": [], "steps": [], "sources": [], "rewards": []}
    first = eid + 1
    for raw in lines:
        eid += 1
        line = (eid - 1) % PER_FILE + 1  # the benchmark's files hold PER_FILE lines each
        _episode_rows(eid, line, raw, file_id, rows)
    con.executemany(_EPISODE, rows["episodes"])
    con.executemany(_STEP, rows["steps"])
    con.executemany(_SOURCE, rows["sources"])
    con.executemany(_REWARD, rows["rewards"])
    con.execute(_INDEX_EPISODES, (json.dumps(list(range(first, eid + 1))),))
    return eid


_SAME = {
    "episodes": "count(*), sum(length(question)), sum(length(answer)), sum(reward), "
    "count(DISTINCT question_id), max(group_index)",
    "steps": "count(*), sum(length(prompt_added)), sum(length(raw_output)), "
    "sum(length(argument)), sum(length(observation)), sum(reward)",
    "episode_rewards": "count(*), sum(value)",
    "episode_sources": "count(*)",
}
"""What the floor's store and the importer's must agree on: that the floor writes what the
importer writes, only with less Python."""


def _summary(db: Path) -> dict[str, tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as con:
        return {t: con.execute(f"SELECT {what} FROM {t}").fetchone() for t, what in _SAME.items()}


def test_the_stores_floor_beside_the_importer(tmp_path: Path) -> None:
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions

    source = write_verl(tmp_path / "verl", EPISODES)
    print(
        f"\n{EPISODES:,} verl episodes of 3 steps into a new SQLite store, in this process; "
        f"load {os.getloadavg()[0]:.1f}, machine reference {machine_reference():,.0f} rows/s"
    )
    for attempt in range(2):
        floor = tmp_path / f"floor-{attempt}.db"
        _show("the store's floor (plain sqlite3)", write_floor(source, floor))
        imported = tmp_path / f"importer-{attempt}.db"
        store = Store(str(imported))
        importer = Importer(store, format_of(source, "verl"), ImportOptions(path=source, name="i"))
        importer.open()
        start = time.perf_counter()
        for f in importer.files():
            importer.import_file(f)
        _show("rollscope's importer", time.perf_counter() - start)
        importer.finish("completed")
        store.close()
        assert _summary(floor) == _summary(imported)


def _show(label: str, seconds: float) -> None:
    rate = f"{seconds / EPISODES * 1e6:.1f} µs an episode, {EPISODES / seconds:,.0f}/s"
    print(f"  {label:<36} {rate}", flush=True)
