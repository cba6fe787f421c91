"""Rows and files found again: a step file caught half-way through a rewrite and then whole
again, a step file renamed, a file that cannot be read, a `--strict` stop whose file is fixed,
a file that begins with a UTF-8 BOM, a file whose name holds control characters. Each is run as
`rollscope import` runs it, and the store read with plain SQL."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.importers.detect import format_of
from app.importers.importer import FileResult, Importer, ImportOptions
from storage.store import Store
from tests.app.importers.conftest import following
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.cli import in_process
from tests.support.plain_sql import sql_rows

_SOURCES = "SELECT count(*), count(DISTINCT sha256), count(gone_file_id) FROM episode_sources"


def _step_file(dump: Path, rollouts: int) -> Path:
    """verl's step-1 file of the first `rollouts` rollouts of one play (a rewrite in place
    caught half-way holds its first lines)."""
    outputs = [sql_response([(f"<solution>SELECT {i}</solution>", None)]) for i in range(rollouts)]
    return verl_dump(
        dump, 1, [sql_prompt(f"Q{i % 2}?") for i in range(rollouts)], outputs,
        ["SELECT 1"] * rollouts, [float(i % 2) for i in range(rollouts)], {},
    )  # fmt: skip


def _import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str | Path
) -> tuple[int, str]:
    return in_process(monkeypatch, capsys, "import", *args)


def _caught_half_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path, list[str | Path]]:
    """A step file of 8 rows imported, then imported again while the trainer rewrote it (3
    rows so far, the same rollouts); (the folder, the store, the import's arguments)."""
    dump, db = tmp_path / "dump", tmp_path / "s.db"
    store: list[str | Path] = ["--name", "rg", "--store", db]
    _step_file(dump, 8)
    assert _import(monkeypatch, capsys, dump, *store)[0] == 0
    _step_file(dump, 3)
    assert _import(monkeypatch, capsys, dump, *store)[0] == 0
    return dump, db, store


def test_a_rewrite_caught_half_way_then_whole_again_leaves_no_episode_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db, store = _caught_half_way(tmp_path, monkeypatch, capsys)
    assert sql_rows(f"sqlite:///{db}", _SOURCES) == [(8, 8, 5)]
    _step_file(dump, 8)  # whole again, byte for byte the first version
    code, err = _import(monkeypatch, capsys, dump, *store)
    assert code == 0, err
    # The file as last read whole holds every row: none is gone, none is read twice.
    assert sql_rows(f"sqlite:///{db}", _SOURCES) == [(8, 8, 0)]
    assert "1.jsonl: 0 episodes, 5 held already" in err


def test_rows_marked_gone_that_come_back_with_a_new_one_are_not_imported_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db, store = _caught_half_way(tmp_path, monkeypatch, capsys)
    _step_file(dump, 9)  # the play's rows back, and one more
    code, err = _import(monkeypatch, capsys, dump, *store)
    assert code == 0, err
    assert "1.jsonl: 1 episode, 5 held already" in err
    assert sql_rows(f"sqlite:///{db}", _SOURCES) == [(9, 9, 0)]
    # Only the new row is new: it joins the step's groups, as a file grown does.
    grouped = "SELECT group_index, count(*) FROM episodes GROUP BY 1 ORDER BY 1"
    assert sql_rows(f"sqlite:///{db}", grouped) == [(0, 5), (1, 4)]


def test_a_step_file_renamed_adds_nothing_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = tmp_path / "dump", tmp_path / "s.db"
    store = ["--name", "rn", "--store", db]
    path = _step_file(dump, 8)
    assert _import(monkeypatch, capsys, dump, *store)[0] == 0
    path.rename(dump / "01.jsonl")  # zero-padded by a script, or archived
    code, err = _import(monkeypatch, capsys, dump, *store)
    assert code == 0, err
    assert "01.jsonl: the very bytes of 1.jsonl, imported before; left as it is" in err
    assert sql_rows(f"sqlite:///{db}", _SOURCES) == [(8, 8, 0)]
    # The copy is recorded: grown later, it is read on from these bytes.
    with (dump / "01.jsonl").open("a") as f:
        f.write(json.dumps({"input": sql_prompt("Q9?"), "output": "<solution>SELECT 9</solution>",
                            "gts": "SELECT 1", "score": 1.0, "step": 1}) + "\n")  # fmt: skip
    code, err = _import(monkeypatch, capsys, dump, *store)
    assert code == 0 and "01.jsonl: 1 episode" in err, err
    assert sql_rows(f"sqlite:///{db}", _SOURCES) == [(9, 9, 0)]


def test_a_file_that_cannot_be_read_is_named_and_counted_and_the_others_come_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = tmp_path / "dump", tmp_path / "s.db"
    for step in (1, 2):
        output = sql_response([("<solution>SELECT 1</solution>", None)])
        verl_dump(dump, step, [sql_prompt("Q?")], [output], ["SELECT 1"], [1.0], {})
    # A step file whose reading fails (EIO): as root a file of mode 000 still reads.
    (dump / "3.jsonl").symlink_to("/proc/self/mem")
    code, err = _import(monkeypatch, capsys, dump, "--name", "r", "--store", db)
    assert code == 0, err
    assert "skipped 3.jsonl: could not be read ([Errno 5] Input/output error" in err
    assert "3.jsonl: could not be read, skipped (counted as 1 bad line on the run)" in err
    runs = "SELECT status, finished_episodes, skipped_lines FROM runs"
    assert sql_rows(f"sqlite:///{db}", runs) == [("completed", 2, 1)]
    # Imported again, still unreadable: told again, counted once.
    code, err = _import(monkeypatch, capsys, dump, "--name", "r", "--store", db)
    assert code == 0 and "skipped 3.jsonl: could not be read" in err, err
    assert sql_rows(f"sqlite:///{db}", runs) == [("completed", 2, 1)]


def test_a_strict_stop_fixed_and_imported_again_leaves_no_reading_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = tmp_path / "dump", tmp_path / "s.db"
    store = ["--name", "bs", "--store", db, "--strict"]
    path = _step_file(dump, 2)
    good = path.read_text().splitlines()
    path.write_text("\n".join([good[0], "{bad", good[1]]) + "\n")
    assert _import(monkeypatch, capsys, dump, *store)[0] == 2
    _step_file(dump, 2)  # fixed in place
    code, err = _import(monkeypatch, capsys, dump, *store)
    assert code == 0, err
    readings = "SELECT rows, episodes, completed_at IS NOT NULL FROM import_files"
    assert sql_rows(f"sqlite:///{db}", readings) == [(2, 2, 1)]


def test_a_file_that_begins_with_a_utf8_bom_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A chat log saved by a Windows tool (PowerShell's Out-File, Notepad) begins with a BOM.
    log, db = tmp_path / "chats.jsonl", tmp_path / "s.db"
    turns = [[{"role": "user", "content": f"Q{i}?"}, {"role": "assistant", "content": "x"}]
             for i in range(2)]  # fmt: skip
    lines = [{"messages": messages, "reward": 1} for messages in turns]
    log.write_bytes("\ufeff".encode() + "".join(json.dumps(x) + "\n" for x in lines).encode())
    code, err = _import(monkeypatch, capsys, log, "--name", "bom", "--store", db)
    assert code == 0, err
    runs = "SELECT source_format, finished_episodes, skipped_lines FROM runs"
    assert sql_rows(f"sqlite:///{db}", runs) == [("messages", 2, 0)]


def test_a_file_name_with_control_characters_is_printed_pictured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = tmp_path / "dump", tmp_path / "s.db"
    path = _step_file(dump, 1)
    path.rename(dump / "a\x1b]0;EVIL\x07b.jsonl")
    code, err = _import(monkeypatch, capsys, dump, "--name", "d", "--store", db, "--format", "verl")
    assert code == 0, err
    assert "\x1b" not in err and "\x07" not in err
    assert "a␛]0;EVIL␇b.jsonl: 1 episode" in err


def test_a_follow_tells_a_file_that_cannot_be_read_once_and_goes_on(
    store: Store, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(dump, 1, [sql_prompt("Q?")], [output], ["SELECT 1"], [1.0], {})
    (dump / "2.jsonl").symlink_to("/proc/self/mem")  # its reading fails (EIO)
    taken: list[FileResult] = []
    notes: list[str] = []
    options = ImportOptions(path=dump, name="f")
    importer = Importer(store, format_of(dump, "verl"), options, on_note=notes.append)
    importer.open()
    with following(importer, taken.append, notes.append, growing=0.1):
        _wait_until(lambda: len(taken) >= 2 and len(notes) >= 1)
        time.sleep(0.5)  # more looks: the file is not taken again
    importer.finish("completed")
    assert [(r.path, r.episodes, r.unreadable) for r in taken] == [
        ("1.jsonl", 1, False),
        ("2.jsonl", 0, True),
    ]
    assert [n.split(" ([Errno")[0] for n in notes] == ["skipped 2.jsonl: could not be read"]
    runs = "SELECT finished_episodes, skipped_lines FROM runs"
    assert sql_rows(store.url, runs) == [(1, 1)]


def _wait_until(check: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within 30 s"
        time.sleep(0.05)
