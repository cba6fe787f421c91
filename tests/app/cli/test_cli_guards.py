"""Commands refuse what would lose data or mislead, in one line with exit 2: an export onto the
store's own files, an export whose file name and format disagree, a run named by digits alone
(every command reads those as a run's id), a `tags --limit` below one; and take what is plain
(a limit past the store's size lists everything, a `.parquet` output writes Parquet). An
episode is named by its digits alone: `1_0` is not episode 10."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from app.recorder import Recorder, RecorderError
from storage.store import Store
from tests.support.cli import in_process, rollscope
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    store = Store(f"sqlite:///{path}")
    try:
        for name in ("first", "second"):
            run = store.create_run(spec(name, kind="import"), episodes_planned=None)
            store.sink(run).write(play(f"{name}-q", 0, "correct", 1.0, 2))
        store.annotate(1, "wrong-join", note="joins on the name")
    finally:
        store.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_export_never_writes_over_the_store(
    store_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(store_file)
    os.link(store_file, store_file.with_name("linked.db"))
    monkeypatch.chdir(store_file.parent)
    for target in (store_file, "runs.db", f"{store_file}-wal", "linked.db", "./runs.db-shm"):
        code, err = in_process(
            monkeypatch, capsys, "export", "--all", "--store", store_file, "--output", target
        )
        assert code == 2, target
        assert "is one of the store's own files; choose another file" in err
    assert _digest(store_file) == before
    journals = {"runs.db-wal", "runs.db-shm"}  # a reader in this process keeps them
    assert {p.name for p in store_file.parent.iterdir()} - journals == {"linked.db", "runs.db"}


def test_export_takes_its_format_from_the_file_name_and_refuses_a_contradiction(
    store_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parquet = tmp_path / "out.parquet"
    code, _ = in_process(
        monkeypatch, capsys, "export", "--all", "--store", store_file, "--output", parquet
    )
    assert code == 0 and pq.read_table(parquet).num_rows == 2
    code, err = in_process(
        monkeypatch, capsys, "export", "--all", "--store", store_file,
        "--output", tmp_path / "out.jsonl", "--format", "parquet",
    )  # fmt: skip
    assert code == 2 and "names a .jsonl file, and --format is parquet" in err
    assert not (tmp_path / "out.jsonl").exists()
    code, err = in_process(monkeypatch, capsys, "export", "--store", store_file)
    assert code == 2 and "name the runs to export: --run NAME (repeatable), or --all" in err
    code, err = in_process(monkeypatch, capsys, "export", "--store", store_file, "--all",
                           "--run", "first")  # fmt: skip
    assert code == 2 and "--run and --all both given" in err


def test_runs_limit_is_one_or_more_and_any_more_lists_them_all(
    store_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in ("0", "-5"):  # "no runs yet", and every run, before
        code, err = in_process(monkeypatch, capsys, "runs", "--store", store_file, "--limit", bad)
        assert code == 2 and "--limit" in err
    listed = rollscope("runs", "--store", store_file, "--json", "--limit", "9" * 20)
    assert listed.returncode == 0
    assert [run["name"] for run in json.loads(listed.stdout)] == ["second", "first"]
    newest = rollscope("runs", "--store", store_file, "--json", "--limit", "1")
    assert [run["name"] for run in json.loads(newest.stdout)] == ["second"]


def test_tags_limit_is_one_or_more_and_any_more_lists_them_all(
    store_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tags = ("tags", "--tag", "wrong-join", "--store", store_file, "--json", "--limit")
    for bad in ("0", "-1"):
        code, err = in_process(monkeypatch, capsys, *tags, bad)
        assert code == 2 and "--limit" in err
    listed = rollscope(*tags, str(2**63 - 1))
    assert listed.returncode == 0 and '"episode_id": 1' in listed.stdout


def test_an_episode_id_is_digits_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "eleven.db"
    store = Store(f"sqlite:///{path}")
    try:
        run = store.create_run(spec("eleven", kind="import"), episodes_planned=None)
        for sample in range(11):
            store.sink(run).write(play("q", sample, "correct", 1.0, 1))
    finally:
        store.close()
    for command in (("show",), ("tag", "x"), ("fork", "--step", "1")):
        for ref in ("1_0", " 10", "\u0661\u0660"):  # int() reads each as 10
            args = (command[0], ref, *command[1:], "--store", path)
            code, err = in_process(monkeypatch, capsys, *args)
            assert code == 2, args
            assert f"{ref!r} is not an episode id" in err
    assert sql_rows(f"sqlite:///{path}", "SELECT COUNT(*) FROM annotations") == [(0,)]
    assert "episode 10  run eleven" in rollscope("show", "10", "--store", path).stdout


def test_a_run_is_never_named_by_digits_alone(
    store_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chat = _chat_log(tmp_path)
    # "2" is the id of the import run `second`: the episodes must not go into it.
    code, err = in_process(
        monkeypatch, capsys, "import", chat, "--name", " 2 ", "--store", store_file
    )
    assert code == 2 and "the run name '2' is a number" in err
    play_42 = ("run", "--policy", "oracle", "--dataset", "demo", "--name", "42")
    code, err = in_process(monkeypatch, capsys, *play_42, "--store", store_file)
    assert code == 2 and "the run name '42' is a number" in err
    with pytest.raises(RecorderError, match="is a number"):
        Recorder(f"sqlite:///{store_file}", run="7")
    url = f"sqlite:///{store_file}"
    assert sql_rows(url, "SELECT id, name FROM runs") == [(1, "first"), (2, "second")]
    assert sql_rows(url, "SELECT COUNT(*) FROM episodes WHERE run_id = 2") == [(1,)]


def test_a_run_name_is_one_line_of_text(
    store_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chat = _chat_log(tmp_path)
    broken = "holds a line break, a tab or a control character; choose another name"
    for name in ("two\nlines", "a\ttab", "esc\x1b[31m", "sep\u2028arated"):
        code, err = in_process(
            monkeypatch, capsys, "import", chat, "--name", name, "--store", store_file
        )
        assert code == 2 and broken in err, name
        play = ("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1", "--name", name)
        code, err = in_process(monkeypatch, capsys, *play, "--store", store_file)
        assert code == 2 and broken in err, name
        with pytest.raises(RecorderError, match="a tab or a control character"):
            Recorder(f"sqlite:///{store_file}", run=name)
    url = f"sqlite:///{store_file}"
    assert sql_rows(url, "SELECT id, name FROM runs") == [(1, "first"), (2, "second")]
    code, _ = in_process(
        monkeypatch, capsys, "import", chat, "--name", "café ☕ run", "--store", store_file
    )
    assert code == 0


def _chat_log(folder: Path) -> Path:
    """A chat log of one episode, to import."""
    chat = folder / "chat.jsonl"
    chat.write_text(
        '{"messages": [{"role": "user", "content": "How many?"}, '
        '{"role": "assistant", "content": "ANSWER 1"}], "reward": 1.0}\n'
    )
    return chat
