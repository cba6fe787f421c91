"""Nothing half: a stop mid-file keeps whole episodes only, and importing again completes the
file with nothing twice. --follow imports each new file once it is whole, and Ctrl-C ends it
cleanly."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from app.importers import importer as importer_module
from app.importers.detect import format_of
from app.importers.importer import FileResult, Importer, ImportOptions
from app.importers.source import WHOLE, Format, Part, Row
from storage import writes
from storage.sink import StoreSink
from storage.store import Store
from tests.app.importers.conftest import following, rows
from tests.app.importers.test_other_formats import _rllm_episode
from tests.app.importers.writers import (
    rllm_log_episode,
    sql_prompt,
    sql_response,
    verifiers_save,
    verl_dump,
)


def write_step(dump: Path, step: int, n: int, first: int = 0) -> Path:
    """A step file of `n` rollouts over seven questions; `first`: the number the first one's
    SQL selects (another number, another rollout)."""
    inputs = [sql_prompt(f"Question {i % 7}?") for i in range(n)]
    outputs = [
        sql_response(
            [(f"<sql>SELECT {i}</sql>", f"{i}"), (f"<solution>SELECT {i}</solution>", None)]
        )
        for i in range(first, first + n)
    ]
    return verl_dump(dump, step, inputs, outputs, [""] * n, [float(i % 2) for i in range(n)], {})


def _whole_episodes(store: Store) -> list[tuple[int, int, int]]:
    """(episodes, of them finished with all their steps, step rows) of the store."""
    return rows(
        store,
        "SELECT count(*), sum(e.outcome IS NOT NULL AND e.steps = "
        "(SELECT count(*) FROM steps s WHERE s.episode_id = e.id)), "
        "(SELECT count(*) FROM steps) FROM episodes e",
    )


def _stopped_import(store: Store, fmt: Format, dump: Path) -> Importer:
    """An import of the dump's one file that Ctrl-C stops, finished as the command does."""
    importer = Importer(store, fmt, ImportOptions(path=dump, name="stopped"))
    importer.open()
    with pytest.raises(KeyboardInterrupt):
        importer.import_file(fmt.files(dump)[0])
    importer.finish("cancelled", "stopped by Ctrl-C")
    return importer


def _import_again(store: Store, fmt: Format, dump: Path) -> tuple[Importer, FileResult]:
    importer = Importer(store, fmt, ImportOptions(path=dump, name="stopped"))
    importer.open()
    result = importer.import_file(fmt.files(dump)[0])
    importer.finish("completed")
    return importer, result


def _stopped_after(call: Callable[..., None], nth: int) -> Callable[..., None]:
    """`call`, with a Ctrl-C landing just after its `nth` run."""
    calls = 0

    def stopped(*args: Any) -> None:
        nonlocal calls
        calls += 1
        call(*args)
        if calls == nth:
            raise KeyboardInterrupt

    return stopped


def _stopping_at(
    reads: Callable[..., Iterator[Row]], row: int, reading: int = 1
) -> Callable[..., Iterator[Row]]:
    """A format's `rows`, with a Ctrl-C before the row `row` (from 0) of its `reading`th pass."""
    passes = 0

    def interrupted(path: Path, part: Part = WHOLE) -> Iterator[Row]:
        nonlocal passes
        passes += 1
        for i, found in enumerate(reads(path, part)):
            if i == row and passes == reading:
                raise KeyboardInterrupt
            yield found

    return interrupted


def test_a_stop_mid_file_keeps_whole_episodes_and_importing_again_completes_it(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 100)
    dump = tmp_path / "dump"
    write_step(dump, 1, 350)
    fmt = format_of(dump, "verl")
    reads = fmt.rows
    # Two batches written, 50 episodes in hand.
    monkeypatch.setattr(fmt, "rows", _stopping_at(reads, 250))
    first = _stopped_import(store, fmt, dump)
    assert _whole_episodes(store) == [(200, 200, 400)]
    # The file it stopped in says what it wrote, for the summary the command prints.
    assert [r.episodes for r in first.in_hand] == [200]
    assert rows(store, "SELECT status, episodes_planned FROM runs") == [("cancelled", 350)]
    monkeypatch.setattr(fmt, "rows", reads)
    again, result = _import_again(store, fmt, dump)
    assert (result.known, result.episodes) == (200, 150) and again.in_hand == []
    assert _whole_episodes(store) == [(350, 350, 700)]
    assert rows(
        store, "SELECT count(DISTINCT line), min(line), max(line) FROM episode_sources"
    ) == [(350, 1, 350)]
    # The episodes read after the stop joined their question's group at the step: seven
    # questions, each one group of 50 samples.
    assert rows(
        store,
        "SELECT count(*), count(DISTINCT question_id), min(n), max(n) FROM (SELECT group_index, "
        "question_id, count(*) AS n FROM episodes GROUP BY group_index, question_id)",
    ) == [(7, 7, 50, 50)]
    assert rows(store, "SELECT status, episodes_planned, finished_episodes FROM runs") == [
        ("completed", 350, 350)
    ]


def test_a_rewrite_stopped_mid_file_and_read_on_is_one_generation_counted_once(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 100)
    dump = tmp_path / "dump"
    write_step(dump, 1, 14)
    fmt = format_of(dump, "verl")
    _import_again(store, fmt, dump)
    write_step(dump, 1, 350, first=1000)  # played again: none of the 14 rollouts is in it
    reads = fmt.rows
    told: list[str] = []
    # Two batches written, 50 episodes in hand; in the second pass over the file, as the
    # first looks for the rows the rewrite dropped.
    monkeypatch.setattr(fmt, "rows", _stopping_at(reads, 250, reading=2))
    importer = Importer(store, fmt, ImportOptions(path=dump, name="stopped"), on_note=told.append)
    importer.open()
    with pytest.raises(KeyboardInterrupt):
        importer.import_file(fmt.files(dump)[0])
    importer.finish("cancelled", "stopped by Ctrl-C")
    assert told == [] and _whole_episodes(store) == [(214, 214, 428)]
    monkeypatch.setattr(fmt, "rows", reads)
    again = Importer(store, fmt, ImportOptions(path=dump, name="stopped"), on_note=told.append)
    again.open()
    again.import_file(fmt.files(dump)[0])
    again.finish("completed")
    assert told == [
        "1.jsonl: 14 rows imported from it before are no longer in it (it was rewritten); "
        "the run keeps them, and the new rollouts make groups of their own"
    ]
    assert rows(store, "SELECT rows, rows_gone FROM import_files ORDER BY id") == [
        (14, 0),
        (350, 14),
    ]
    # Seven questions, each a group of the first playing (2 samples) and one of the second
    # (50): the rollouts read after the stop joined the second's groups.
    sizes = "SELECT count(*) FROM episodes GROUP BY group_index ORDER BY group_index"
    assert rows(store, sizes) == [(2,)] * 7 + [(50,)] * 7


def test_a_stop_inside_a_write_leaves_none_of_its_batch(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C can land while a batch is being written (the write runs on the reading thread):
    the batch's transaction is rolled back whole, and importing again writes it."""
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 100)
    dump = tmp_path / "dump"
    write_step(dump, 1, 250)
    fmt = format_of(dump, "verl")
    indexed = writes.index_episodes  # the last statement of a batch's transaction
    monkeypatch.setattr(writes, "index_episodes", _stopped_after(indexed, 2))
    first = _stopped_import(store, fmt, dump)
    assert _whole_episodes(store) == [(100, 100, 200)]
    assert rows(store, "SELECT count(*) FROM episode_sources") == [(100,)]
    assert rows(store, "SELECT finished_episodes FROM runs") == [(100,)]
    assert [r.episodes for r in first.in_hand] == [100]
    monkeypatch.setattr(writes, "index_episodes", indexed)
    _, result = _import_again(store, fmt, dump)
    assert (result.known, result.episodes) == (100, 150)
    assert _whole_episodes(store) == [(250, 250, 500)]
    assert rows(store, "SELECT finished_episodes FROM runs") == [(250,)]


def test_a_stop_just_after_a_write_commits_counts_its_batch(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal can land once a batch's transaction has committed, before the import counts
    it: what the command then tells is what the store holds."""
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 100)
    dump = tmp_path / "dump"
    write_step(dump, 1, 250)
    fmt = format_of(dump, "verl")
    write = StoreSink._write
    monkeypatch.setattr(StoreSink, "_write", _stopped_after(write, 2))
    first = _stopped_import(store, fmt, dump)
    assert _whole_episodes(store) == [(200, 200, 400)]
    assert [r.episodes for r in first.in_hand] == [200]
    monkeypatch.setattr(StoreSink, "_write", write)
    _, result = _import_again(store, fmt, dump)
    assert (result.known, result.episodes) == (200, 50)


def test_small_files_go_in_groups_and_a_stop_loses_only_the_group_in_hand(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rLLM writes a file an episode: files are begun, written and finished a group (about a
    batch's rows) at a time, not in three transactions each."""
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 2)
    logs = tmp_path / "rllm"
    for sample in range(5):
        rllm_log_episode(logs, _rllm_episode("task-a", sample, sample == 0), step=1)
    fmt = format_of(logs, "rllm")
    files = fmt.files(logs)
    writes_made: list[int] = []
    write = StoreSink.write

    def counted(sink: StoreSink, batch: Any) -> None:
        writes_made.append(len(batch.finished))
        write(sink, batch)

    monkeypatch.setattr(StoreSink, "write", counted)
    reads = fmt.rows

    def stopped_at_the_fourth(path: Path) -> Iterator[Row]:
        if path == files[3]:
            raise KeyboardInterrupt
        return reads(path)

    monkeypatch.setattr(fmt, "rows", stopped_at_the_fourth)
    first = Importer(store, fmt, ImportOptions(path=logs, name="small"))
    first.open()
    told: list[FileResult] = []
    with pytest.raises(KeyboardInterrupt):
        told.extend(first.import_files(files))
    first.finish("cancelled", "stopped by Ctrl-C")
    # The first group whole; the second begun (its files recorded), its episode in hand lost.
    assert writes_made == [2] and [r.episodes for r in told] == [1, 1]
    assert [r.episodes for r in first.in_hand] == [0, 0]
    assert rows(store, "SELECT count(*), count(completed_at) FROM import_files") == [(4, 2)]
    assert _whole_episodes(store) == [(2, 2, 4)]

    monkeypatch.setattr(fmt, "rows", reads)
    writes_made.clear()
    again = Importer(store, fmt, ImportOptions(path=logs, name="small"))
    again.open()
    results = list(again.import_files(files))
    again.finish("completed")
    assert writes_made == [2, 1]  # the files read before pass in their group with no write
    assert [(r.already, r.episodes) for r in results] == [(True, 0), (True, 0)] + [(False, 1)] * 3
    assert _whole_episodes(store) == [(5, 5, 10)]
    assert rows(store, "SELECT count(*), count(completed_at), sum(episodes) FROM import_files") == [
        (5, 5, 5)
    ]
    assert rows(store, "SELECT episodes_planned, finished_episodes FROM runs") == [(5, 5)]


def _wait_for(check: object, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {seconds:.0f} s")


def test_follow_imports_each_new_file_once_it_is_whole(store: Store, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    importer = Importer(store, format_of(dump, "verl"), ImportOptions(path=dump, name="live"))
    run_id = importer.open()
    imported: list[str] = []
    with following(importer, lambda r: imported.append(r.path)):
        write_step(dump, 1, 8)
        _wait_for(lambda: imported == ["1.jsonl"], "the first file's import")
        run = store.get_run(run_id)
        assert run is not None and run.status == "running" and run.episodes_finished == 8
        # A file still being written (its last line without its newline) waits.
        whole = write_step(tmp_path / "elsewhere", 2, 8).read_bytes()
        partial = dump / "2.jsonl"
        partial.write_bytes(whole[: len(whole) // 2].rstrip(b"\n"))
        time.sleep(0.5)  # ten looks at it
        assert imported == ["1.jsonl"]
        partial.write_bytes(whole)
        _wait_for(lambda: imported == ["1.jsonl", "2.jsonl"], "the second file's import")
    importer.finish("completed")
    assert rows(store, "SELECT train_step, count(*) FROM episodes GROUP BY 1") == [(1, 8), (2, 8)]

    # Followed again: each file is told once as read before (the summary says "nothing new").
    again = Importer(store, format_of(dump, "verl"), ImportOptions(path=dump, name="live"))
    again.open()
    told: list[tuple[str, bool]] = []
    with following(again, lambda r: told.append((r.path, r.already))):
        _wait_for(lambda: len(told) == 2, "the files read before to be told")
        time.sleep(0.3)  # more looks: told once each
    again.finish("completed")
    assert sorted(told) == [("1.jsonl", True), ("2.jsonl", True)]


def test_follow_takes_a_file_that_keeps_growing_and_reads_on_from_where_it_left(
    store: Store, tmp_path: Path
) -> None:
    """An evaluation appending a rollout as each finishes never leaves its file unchanged for
    one look: it is taken once it has grown for `growing` seconds, each reading the new lines."""
    run_dir = tmp_path / "eval"

    def output(i: int) -> dict[str, Any]:
        return {
            "example_id": i,
            "prompt": [{"role": "user", "content": f"Question {i}?"}],
            "completion": [{"role": "assistant", "content": "ANSWER 1"}],
            "reward": 1.0,
        }

    verifiers_save(run_dir, [output(0)], {"model": "m"})
    importer = Importer(
        store, format_of(run_dir, "verifiers"), ImportOptions(path=run_dir, name="e")
    )
    importer.open()
    results: list[FileResult] = []
    with following(importer, results.append, growing=0.3):
        for i in range(1, 100):  # a rollout every 20 ms, for two seconds
            verifiers_save(run_dir, [output(i)], {"model": "m"}, mode="a")
            time.sleep(0.02)
        while_growing = len(results)
        _wait_for(lambda: sum(r.episodes for r in results) == 100, "the last rollouts")
    importer.finish("completed")
    assert while_growing >= 2
    assert all(r.known == 0 and not r.already for r in results)
    assert rows(
        store, "SELECT count(DISTINCT line), min(line), max(line) FROM episode_sources"
    ) == [(100, 1, 100)]


def test_a_file_gone_while_a_follow_reads_it_is_told_and_the_rest_come_in(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "dump"
    for step in (1, 2, 3):
        write_step(dump, step, 4)
    take = Importer._take

    def deleted_first(self: Importer, path: Path) -> Any:
        if path.name == "2.jsonl":
            path.unlink()  # a trainer's cleanup between the listing and the reading
        return take(self, path)

    monkeypatch.setattr(Importer, "_take", deleted_first)
    importer = Importer(store, format_of(dump, "verl"), ImportOptions(path=dump, name="gone"))
    importer.open()
    imported: list[str] = []
    notes: list[str] = []
    with following(importer, lambda r: imported.append(r.path), on_note=notes.append):
        _wait_for(lambda: imported == ["1.jsonl", "3.jsonl"], "the files left to come in")
    importer.finish("completed")
    assert notes == ["2.jsonl went away while it was read; left out"]
    assert rows(store, "SELECT train_step, count(*) FROM episodes GROUP BY 1") == [(1, 4), (3, 4)]


_READ_WHOLE = "SELECT count(*) FROM import_files WHERE completed_at IS NOT NULL"


def test_ctrl_c_ends_a_follow_cleanly_and_a_later_import_reads_only_what_is_new(
    tmp_path: Path,
) -> None:
    dump = tmp_path / "dump"
    db = tmp_path / "store.db"
    write_step(dump, 1, 5)
    args = [sys.executable, "-m", "app.cli", "import", str(dump), "--name", "watched"]
    args += ["--store", str(db)]
    proc = subprocess.Popen(
        [*args, "--follow", "--poll", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def imported() -> bool:
            if not db.exists():
                return False
            try:
                reader = Store(str(db), read_only=True)
            except Exception:  # the writer is still creating it
                return False
            try:
                run = reader.find_run("watched")
                if run is None or run.episodes_finished != 5:
                    return False
            finally:
                reader.close()
            # The file is marked read whole just after its episodes commit: a Ctrl-C between
            # the two leaves it to be read again (its rows found held), not "imported before".
            with closing(sqlite3.connect(db)) as conn:
                return bool(conn.execute(_READ_WHOLE).fetchone()[0] == 1)

        _wait_for(imported, "the follow's first import", 120)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "stopped: importing again under --name 'watched' reads on from here" in err
    # Its seconds were mostly waiting: no rate of them.
    assert "5 episodes from 1 verl rollout dump file in " in out, out
    assert " s of following" in out and "episodes/s" not in out, out
    store = Store(f"sqlite:///{db}")
    try:
        assert rows(store, "SELECT status, finished_episodes FROM runs") == [("completed", 5)]
        write_step(dump, 2, 3)
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "1.jsonl: imported before, left as it is" in done.stderr
        assert "2.jsonl: 3 episodes" in done.stderr
        counts = rows(store, "SELECT train_step, count(*) FROM episodes GROUP BY 1 ORDER BY 1")
        assert counts == [(1, 5), (2, 3)]
    finally:
        store.close()
