"""Import speed: verl JSONL of multi-turn rollouts and TRL completion Parquet into SQLite, the
peak memory of the importing process at two sizes, and how soon `--follow` has a new file in
the store.

Run on request: `pytest tests/benchmarks/bench_import.py --benchmarks -s`.
ROLLSCOPE_BENCH_IMPORT_EPISODES (default 100,000) sets the episodes of the large import
(1,000,000 is the issue's size: 2.6 GB of JSONL). Targets: 10,000 episodes/s, flat memory,
a new file in the store within 5 s. Each import runs `rollscope import` as its own process;
its CPU time and peak RSS are that process's (`os.wait4`), so a shared machine's waiting for a
core shows in the wall time only.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store
from tests.benchmarks.bench_sink import machine_reference
from tests.support.postgres import PgServer

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(7200)]

EPISODES = int(os.environ.get("ROLLSCOPE_BENCH_IMPORT_EPISODES", "100000"))
PER_FILE = 5120
"""Episodes a training step writes: 640 prompts x 8 samples."""
GROUP = 8
TARGET = 10_000
FOLLOW_TARGET = 5.0

SCHEMA = "\n".join(
    f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, name TEXT, value REAL, created TEXT);"
    for i in range(12)
)
SYSTEM = (
    "You are a data scientist. Think step by step inside <think>...</think>, run SQL inside "
    "<sql>...</sql> (the result comes back in <observation>), and give the final SQL inside "
    "<solution>...</solution>."
)


def _turns(q: int, i: int) -> list[tuple[str, str | None]]:
    """Three turns of a SkyRL-SQL style agent: two queries with their results, an answer."""
    rows = "\n".join(f"| {q + r} | name {r} | {r * 1.5} |" for r in range(5))
    table, count = f"t{q % 12}", f"SELECT count(*) FROM t{q % 12} WHERE value > {i}"
    return [
        (f"<think>Which of the tables holds it? Look at {table} first.</think>\n"
         f"<sql>SELECT * FROM {table} LIMIT 5</sql>", f"\n| id | name | value |\n{rows}\n"),
        (f"<think>Now filter on value above {i}.</think>\n<sql>{count}</sql>",
         f"\n| count(*) |\n| {q} |\n"),
        (f"<think>That is the answer.</think>\n<solution>{count}</solution>", None),
    ]  # fmt: skip


def _question(q: int) -> str:
    ask = f"how many rows of t{q % 12} have a value above {q % 97}?"
    return f"Database schema:\n{SCHEMA}\nQuestion {q}: {ask}"


def write_verl(root: Path, episodes: int) -> Path:
    """verl's `_dump_generations` layout: `{step}.jsonl`, one rollout a line."""
    root.mkdir(parents=True, exist_ok=True)
    for step, start in enumerate(range(0, episodes, PER_FILE), start=1):
        lines = [_verl_line(e, step) for e in range(start, min(episodes, start + PER_FILE))]
        (root / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def _verl_line(e: int, step: int) -> str:
    """Episode `e` as `_dump_generations` writes it (without its newline)."""
    q = e // GROUP
    prompt = f"system\n{SYSTEM}\nuser\n{_question(q)}\nassistant\n"
    output = "".join(
        text + (f"\nuser\n<observation>{obs}</observation>\nassistant\n" if obs else "")
        for text, obs in _turns(q, e % GROUP)
    )
    score = float(e % 3 == 0)
    entry = {"input": prompt, "output": output, "gts": "SELECT 1", "score": score,
             "step": step, "acc": score, "format_reward": 1.0}  # fmt: skip
    return json.dumps(entry, ensure_ascii=False)


def write_rllm(root: Path, episodes: int) -> Path:
    """rLLM's `EpisodeLogger.log_episode` layout: a JSON file an episode, a folder a step, each
    step's chat completions holding the conversation so far."""
    from tests.app.importers.writers import rllm_log_episode

    for e in range(episodes):
        q = e // GROUP
        chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _question(q)}]
        steps = []
        observation = _question(q)
        for text, obs in _turns(q, e % GROUP):
            chat = [*chat, {"role": "assistant", "content": text}]
            step = {"observation": observation, "model_response": text, "chat_completions": chat}
            steps.append(step | {"reward": 0.0, "done": obs is None})
            if obs is not None:
                chat = [*chat, {"role": "user", "content": obs}]
                observation = obs
        steps[-1]["reward"] = score = float(e % 3 == 0)
        episode = {"id": f"task-{q}:{e % GROUP}", "task": {"question": _question(q)},
                   "is_correct": bool(score), "trajectories": [{"reward": score,
                   "steps": steps}]}  # fmt: skip
        rllm_log_episode(root, episode, step=e // PER_FILE + 1)
    return root


def write_trl(root: Path, episodes: int) -> Path:
    """TRL's `GRPOTrainer.log` layout: `completions/completions_{step:05d}.parquet` with the
    prompt and a tool-calling completion as messages, a column per reward, `advantage`."""
    import pandas as pd

    folder = root / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    for step, start in enumerate(range(0, episodes, PER_FILE), start=1):
        columns = ("step", "prompt", "completion", "exec_reward", "format_reward", "advantage")
        table: dict[str, list[Any]] = {name: [] for name in columns}
        for e in range(start, min(episodes, start + PER_FILE)):
            q = e // GROUP
            completion: list[dict[str, Any]] = []
            for text, obs in _turns(q, e % GROUP):
                completion.append({"role": "assistant", "content": text})
                if obs:
                    completion.append({"role": "tool", "content": obs})
            table["step"].append(step)
            table["prompt"].append([{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": _question(q)}])  # fmt: skip
            table["completion"].append(completion)
            table["exec_reward"].append(float(e % 3 == 0))
            table["format_reward"].append(1.0)
            table["advantage"].append(0.0)
        pd.DataFrame(table).to_parquet(folder / f"completions_{step:05d}.parquet")
    return root


def run_import(path: Path, db: Path | str, *extra: str) -> dict[str, float]:
    """`rollscope import` in its own process: wall and CPU seconds, peak RSS (MB)."""
    cmd = [sys.executable, "-m", "app.cli", "import", str(path), "--name", "bench", "--store",
           str(db), "--quiet", *extra]  # fmt: skip
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert os.waitstatus_to_exitcode(status) == 0, err[-2000:]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024,
            "load": (load + os.getloadavg()[0]) / 2, "out": out}  # type: ignore[dict-item]  # fmt: skip


def _line(label: str, episodes: int, m: dict[str, float]) -> str:
    rate = episodes / m["wall"]
    flag = "" if rate >= TARGET else "  SLOW"
    return (
        f"{label:<26} {episodes:>9,} {m['wall']:>8.1f} {rate:>9,.0f} {m['cpu']:>8.1f} "
        f"{episodes / m['cpu']:>10,.0f} {m['rss']:>8.0f} {m['load']:>5.1f}{flag}"
    )


def test_import_throughput_and_memory(tmp_path: Path) -> None:
    small = max(EPISODES // 10, PER_FILE)
    print(
        f"\nrollscope import into SQLite; {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, machine reference {machine_reference():,.0f} rows/s "
        f"(target {TARGET:,} episodes/s)"
    )
    print(f"{'import':<26} {'episodes':>9} {'wall s':>8} {'ep/s':>9} {'cpu s':>8} "
          f"{'ep/cpu-s':>10} {'rss MB':>8} {'load':>5}")  # fmt: skip
    for label, writer, sizes in (
        ("verl JSONL, 3 steps each", write_verl, (small, EPISODES)),
        ("TRL Parquet, 3 steps each", write_trl, (small, EPISODES)),
        # A file an episode: the per-file bookkeeping, not the rows, is what it measures.
        ("rLLM, a file an episode", write_rllm, (small,)),
    ):
        for n in sizes:
            source = writer(tmp_path / f"{writer.__name__}-{n}", n)
            db = tmp_path / f"{writer.__name__}-{n}.db"
            m = run_import(source, db)
            print(_line(f"{label}", n, m), flush=True)
            db.unlink()
            for f in source.rglob("*"):
                if f.is_file():
                    f.unlink()


def test_import_into_postgresql(tmp_path: Path, postgres_server: PgServer) -> None:
    """20,480 verl episodes into a new PostgreSQL database and into a new SQLite file, in
    turn, twice. The test session's server runs without fsync (`tests/support/postgres.py`)."""
    episodes = 4 * PER_FILE
    source = write_verl(tmp_path / "verl", episodes)
    print(
        f"\nrollscope import of {episodes:,} verl episodes; {os.cpu_count()} cores, machine "
        f"reference {machine_reference():,.0f} rows/s"
    )
    print(f"{'store':<26} {'episodes':>9} {'wall s':>8} {'ep/s':>9} {'cpu s':>8} "
          f"{'ep/cpu-s':>10} {'rss MB':>8} {'load':>5}")  # fmt: skip
    for attempt in range(2):
        with postgres_server.database(f"bench_import_{attempt}") as url:
            print(_line("PostgreSQL (importer CPU)", episodes, run_import(source, url)))
        print(_line("SQLite", episodes, run_import(source, tmp_path / f"{attempt}.db")))


def test_where_an_import_spends_its_time(tmp_path: Path) -> None:
    """A profile of an import in this process: the sink's share, and the functions on top."""
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions

    source = write_verl(tmp_path / "verl", 20_480)
    store = Store(str(tmp_path / "profile.db"))
    importer = Importer(store, format_of(source, "verl"), ImportOptions(path=source, name="p"))
    importer.open()
    profile = cProfile.Profile()
    profile.enable()
    for f in importer.files():
        importer.import_file(f)
    importer.finish("completed")
    profile.disable()
    store.close()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    total = stats.total_tt  # type: ignore[attr-defined]
    sink = next(
        (v[3] for k, v in stats.stats.items() if k[2] == "write_batch"),  # type: ignore[attr-defined]
        0.0,
    )
    print(f"\nprofile of 20,480 verl episodes: {total:.1f} s under the profiler, of which the "
          f"sink's write_batch {sink:.1f} s ({sink / total:.0%}; on the writer thread, beside "
          "the reading)")  # fmt: skip
    stats.sort_stats("tottime").print_stats(15)
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:4000])


def test_an_episodes_cost_by_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Microseconds an imported episode costs in each part, without a profiler (best of 3):
    reading its line, making its records, and the sink's write by what it writes. With the
    reading free, the write alone would cap the rate at 1e6 / (its microseconds)."""
    import gc

    import storage.writes as writes
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions
    from storage.prompts import PromptEncoder
    from storage.sink import StoreSink

    episodes = 20_480
    source = write_verl(tmp_path / "verl", episodes)
    spent: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    parts = {
        "episode rows (12 indexes)": "_insert_started",
        "step rows": "executemany_values",
        "sources and named rewards": "write_extras",
        "text search index": "index_episodes",
    }
    for name, attr in parts.items():
        monkeypatch.setattr(writes, attr, timed(name, getattr(writes, attr)))
    monkeypatch.setattr(PromptEncoder, "encode", timed("prompts", PromptEncoder.encode))
    monkeypatch.setattr(StoreSink, "_write", timed("write", StoreSink._write))

    best: dict[str, float] = {}
    for attempt in range(3):
        spent.clear()
        store = Store(str(tmp_path / f"parts-{attempt}.db"))
        importer = Importer(store, format_of(source, "verl"), ImportOptions(path=source, name="p"))
        importer.open()
        files = importer.files()
        gc.disable()  # as the importer reads
        try:
            start = time.perf_counter()
            for f in files:
                for _ in importer.fmt.rows(f):
                    pass
            spent["reading the lines"] = time.perf_counter() - start
        finally:
            gc.enable()
        start = time.perf_counter()
        for f in files:
            importer.import_file(f)
        spent["whole import"] = time.perf_counter() - start
        importer.finish("completed")
        store.close()
        for name, seconds in spent.items():
            best[name] = min(best.get(name, seconds), seconds)
    us = {name: seconds / episodes * 1e6 for name, seconds in best.items()}
    write = us["write"]
    shown = sum(us[name] for name in (*parts, "prompts"))
    us["the rest of the write (its Python, the commit)"] = write - shown
    us["records"] = us["whole import"] - write - us["reading the lines"]
    load, reference = os.getloadavg()[0], machine_reference()
    print(f"\n{episodes:,} verl episodes of 3 steps, microseconds an episode (best of 3; load "
          f"{load:.1f}, machine reference {reference:,.0f} rows/s):")  # fmt: skip
    for name in ("reading the lines", "records", "write", *parts, "prompts",
                 "the rest of the write (its Python, the commit)", "whole import"):  # fmt: skip
        indent = (
            "    " if name in parts or name in ("prompts",) or name.startswith("the rest") else ""
        )
        print(f"  {indent}{name:<{48 - len(indent)}} {us[name]:7.1f}")
    print(
        f"  whole import: {1e6 / us['whole import']:,.0f} episodes/s; the write alone caps it "
        f"at {1e6 / write:,.0f}"
    )


def _wait_for_store(db: Path) -> None:
    """Until the importer has made its store (slow to start on a busy machine)."""
    from storage.engine import StoreMissing

    waited = time.perf_counter()
    while True:
        try:
            Store(str(db), read_only=True).close()
            return
        except StoreMissing:
            if time.perf_counter() - waited > 120:
                raise
            time.sleep(0.2)


def _follower(dump: Path, db: Path) -> subprocess.Popen[bytes]:
    """`rollscope import --follow` of the (new, empty) verl folder `dump` into `db`."""
    dump.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "import", str(dump), "--name", "live", "--store",
         str(db), "--format", "verl", "--follow", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_follow_shows_a_new_file_soon(tmp_path: Path) -> None:
    """Seconds from a step file's close to its last episode in the store (read as the
    dashboard reads it), with `--follow` at its default poll."""
    dump, db = tmp_path / "dump", tmp_path / "follow.db"
    proc = _follower(dump, db)
    seen: list[float] = []
    try:
        _wait_for_store(db)  # the importer is up and waiting
        for step in range(1, 4):
            write_verl(tmp_path / "staging", PER_FILE * step)
            data = (tmp_path / "staging" / f"{step}.jsonl").read_bytes()
            with open(dump / f"{step}.jsonl", "wb") as f:  # as verl writes it: in place
                f.write(data)
            closed = time.perf_counter()
            while True:
                reader = Store(str(db), read_only=True)
                run = reader.find_run("live")
                reader.close()
                if run is not None and run.episodes_finished >= PER_FILE * step:
                    break
                if time.perf_counter() - closed > 120:
                    raise AssertionError("the follow did not import the file in 120 s")
                time.sleep(0.05)
            seen.append(time.perf_counter() - closed)
    finally:
        proc.send_signal(2)
        proc.wait(timeout=60)
    worst = max(seen)
    flag = "" if worst <= FOLLOW_TARGET else "  SLOW"
    print(
        f"\n--follow (poll 1 s), a {PER_FILE:,}-episode step file in the store after: "
        + ", ".join(f"{s:.1f} s" for s in seen)
        + f"; load {os.getloadavg()[0]:.1f}{flag} (the dashboard's live pages refresh every "
        "2-3 s on top)"
    )


GROWING_RATE = 100
"""Rollouts a second an appending writer adds (an evaluation's, as each finishes)."""
GROWING_SECONDS = 30


def test_follow_shows_a_growing_file_soon(tmp_path: Path) -> None:
    """Seconds from a line's end to its episode in the store, for a file that is appended
    to without a pause (it is never unchanged for one look), with `--follow` at its default
    poll; and the follower's CPU."""
    dump, db = tmp_path / "dump", tmp_path / "follow.db"
    proc = _follower(dump, db)
    total = GROWING_RATE * GROWING_SECONDS
    written: list[float] = []

    def write() -> None:
        with open(dump / "1.jsonl", "a", encoding="utf-8") as f:
            began = time.perf_counter()
            for e in range(total):
                f.write(_verl_line(e, 1) + "\n")
                f.flush()
                written.append(time.perf_counter())
                time.sleep(max(0.0, began + (e + 1) / GROWING_RATE - time.perf_counter()))

    lags: list[float] = []
    try:
        _wait_for_store(db)
        writer = threading.Thread(target=write)
        writer.start()
        while len(lags) < total:
            reader = Store(str(db), read_only=True)
            run = reader.find_run("live")
            reader.close()
            now = time.perf_counter()
            lags += [
                now - written[i] for i in range(len(lags), run.episodes_finished if run else 0)
            ]
            if writer.is_alive() is False and now - written[-1] > 120:
                raise AssertionError("the follow did not import the file's end in 120 s")
            time.sleep(0.1)
        writer.join()
    finally:
        proc.send_signal(2)
        _, _, usage = os.wait4(proc.pid, 0)
    with closing(sqlite3.connect(db)) as conn:
        readings = conn.execute("SELECT count(*) FROM import_files").fetchone()[0]
    lags.sort()
    worst = lags[-1]
    flag = "" if worst <= FOLLOW_TARGET else "  SLOW"
    print(
        f"\n--follow (poll 1 s), a file growing by {GROWING_RATE} rollouts a second for "
        f"{GROWING_SECONDS} s: a rollout in the store after median {lags[len(lags) // 2]:.1f} s, "
        f"90% {lags[int(len(lags) * 0.9)]:.1f} s, at most {worst:.1f} s; {readings} readings; "
        f"the follower's CPU {usage.ru_utime + usage.ru_stime:.1f} s; "
        f"load {os.getloadavg()[0]:.1f}{flag}"
    )
