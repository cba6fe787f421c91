"""`rollscope runs`, `show`, `export` and `dashboard` read a store without writing to it, on a
writable folder and on a truly read-only file system; `rollscope migrate` upgrades one."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest
from alembic.config import Config
from typer.testing import CliRunner

from app.cli import cli
from storage import migrations as storage_migrations
from storage.migrations import head_revision
from storage.store import Store
from tests.conftest import REPO
from tests.support.benchmark import make_benchmark
from tests.support.cli import rollscope, rollscope_cmd
from tests.support.mounts import run_read_only
from tests.support.records import spec as run_spec
from tests.support.store_files import (
    copy_store,
    files_beside,
    to_rollback_journal,
    upgrade_only_to,
    wal_header,
)

RUN = "oracle-ro"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store written by `rollscope run` (closed: a WAL file with no -wal or -shm left)."""
    root = tmp_path_factory.mktemp("recorded")
    questions, db_dir = make_benchmark(root / "bench")
    store = root / "store" / "store.db"
    store.parent.mkdir()
    res = rollscope(
        "run", "--questions", questions, "--db-dir", db_dir, "--store", store,
        "--limit", "2", "--name", RUN, "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return store


def first_episode(store: Path) -> tuple[int, str]:
    """(id, question) of the store's first episode, read without writing."""
    with closing(sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT id, question FROM episodes ORDER BY id LIMIT 1").fetchone()
    return int(row[0]), str(row[1])


def store_copy(recorded: Path, folder: Path, journal: str) -> Path:
    """A private copy of the recorded store, as a WAL or a rollback-journal file."""
    path = copy_store(recorded, folder)
    if journal == "rollback":
        to_rollback_journal(path)
    assert wal_header(path) is (journal == "wal")
    return path


def check_reads(outputs: list[subprocess.CompletedProcess[str]], question: str) -> None:
    """The outputs of `runs --json`, `show ID` and `export` on the recorded store."""
    listed, shown, exported = outputs
    for res in outputs:
        assert res.returncode == 0, res.stderr
    runs = json.loads(listed.stdout)
    assert [(r["name"], r["status"], r["episodes_finished"]) for r in runs] == [
        (RUN, "completed", 2)
    ]
    assert question in shown.stdout and "Answer submitted: correct." in shown.stdout
    assert "wrote 2 episodes" in exported.stdout


@pytest.mark.parametrize("journal", ["rollback", "wal"])
def test_read_commands_leave_the_store_byte_identical(
    recorded: Path, tmp_path: Path, journal: str
) -> None:
    episode_id, question = first_episode(recorded)
    path = store_copy(recorded, tmp_path / "store", journal)
    before = files_beside(path)
    assert list(before) == ["store.db"]
    out = tmp_path / "out.jsonl"
    check_reads(
        [
            rollscope("runs", "--store", path, "--json"),
            rollscope("show", str(episode_id), "--store", path),
            rollscope("export", "--run", RUN, "--store", path, "--output", out),
        ],
        question,
    )
    after = files_beside(path)
    assert after["store.db"] == before["store.db"]
    if journal == "rollback":
        assert after == before  # nothing new beside it: no journal, no -wal, no -shm
    else:
        # SQLite's own -wal (empty) and -shm index, which a WAL reader needs to follow a
        # writer; a read-only connection may not delete them. Nothing else appears.
        assert set(after) - set(before) <= {"store.db-wal", "store.db-shm"}
        assert (path.parent / "store.db-wal").stat().st_size == 0


@pytest.mark.parametrize("journal", ["rollback", "wal"])
def test_read_commands_work_on_a_read_only_file_system(
    recorded: Path, tmp_path: Path, journal: str
) -> None:
    episode_id, question = first_episode(recorded)
    path = store_copy(recorded, tmp_path / "store", journal)
    before = files_beside(path)
    assert list(before) == ["store.db"]  # a WAL store closed by its writer: no -wal, no -shm
    view = tmp_path / "view"
    view.mkdir()
    seen = view / "store.db"
    out = tmp_path / "out.jsonl"
    outputs = [
        run_read_only(path.parent, view, rollscope_cmd(*args), cwd=REPO)
        for args in (
            ("runs", "--store", seen, "--json"),
            ("show", str(episode_id), "--store", seen),
            ("export", "--run", RUN, "--store", seen, "--output", out),
        )
    ]
    check_reads(outputs, question)
    assert files_beside(path) == before


def test_read_only_file_system_with_a_live_writer_shows_its_commits(
    recorded: Path, tmp_path: Path
) -> None:
    path = store_copy(recorded, tmp_path / "store", "wal")
    writer = Store(str(path))  # held open: its commits stay in the -wal, the -shm is live
    try:
        writer.create_run(run_spec("second"), episodes_planned=1, status="queued")
        assert (path.parent / "store.db-wal").stat().st_size > 0
        view = tmp_path / "view"
        view.mkdir()
        res = run_read_only(
            path.parent,
            view,
            rollscope_cmd("runs", "--store", view / "store.db", "--json"),
            cwd=REPO,
        )
        assert res.returncode == 0, res.stderr
        assert sorted(r["name"] for r in json.loads(res.stdout)) == [RUN, "second"]
    finally:
        writer.close()


def test_read_only_wal_without_its_shm_is_refused_in_one_line(
    recorded: Path, tmp_path: Path
) -> None:
    live = store_copy(recorded, tmp_path / "live", "wal")
    writer = Store(str(live))
    found = writer.find_run(RUN)
    assert found is not None
    writer.tag_run(found.id, "stage", "only in the wal")
    # A backup taken while a run wrote: the store and its -wal, no -shm.
    path = copy_store(live, tmp_path / "backup")
    copy_store(Path(f"{live}-wal"), path.parent)
    writer.close()
    view = tmp_path / "view"
    view.mkdir()
    res = run_read_only(
        path.parent, view, rollscope_cmd("runs", "--store", view / "store.db"), cwd=REPO
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds commits but has no store.db-shm" in lines[0], res.stderr
    assert "copy the store with its -wal to a writable folder" in lines[0]


@pytest.mark.parametrize("command", ["runs", "show", "export", "dashboard"])
def test_readers_create_no_store(tmp_path: Path, command: str) -> None:
    path = tmp_path / "nothing.db"
    args = {
        "runs": ["runs"],
        "show": ["show", "1"],
        "export": ["export", "--run", RUN],
        "dashboard": ["dashboard", "--read-only"],
    }[command]
    res = rollscope(*args, "--store", path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no store at {path}" in lines[0], res.stderr
    assert f"`rollscope migrate --store {path}`" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_an_address_the_dashboard_cannot_listen_on_is_told_in_one_line(tmp_path: Path) -> None:
    # Streamlit binds it itself, and told each of these in a traceback.
    path = tmp_path / "new.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        for flags, told in [
            (["--port", "70000"], "--port must be between 0 and 65535, got 70000"),
            (["--port", "-1"], "--port must be between 0 and 65535, got -1"),
            (["--host", "no-such-host.invalid"], "cannot listen on no-such-host.invalid:8501: "),
            (["--host", "h" * 300], f"cannot listen on {'h' * 77}...:8501: "),
            (["--host", "é" * 100], "not a host name or address"),
            (["--port", busy], f"port {busy} on 127.0.0.1 is in use: choose another --port"),
        ]:
            res = rollscope("dashboard", *flags, "--store", path)
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2 and len(lines) == 1 and told in lines[0], res.stderr
    assert not path.exists(), "no store is made for a dashboard that cannot serve"


def test_dashboard_folders_a_file_is_refused_and_a_missing_one_is_told(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"")
    for option, holding in [
        ("--checkpoint-root", "checkpoints"),
        ("--dataset-root", "questions files"),
    ]:
        res = rollscope("dashboard", option, a_file, "--store", path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert f"{option} {a_file} is a file: name the folder that holds the {holding}" in lines[0]
        # A name past the file system's length: OSError.
        res = rollscope("dashboard", option, tmp_path / ("f" * 300), "--store", path)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "cannot be used (File name too long)" in res.stderr
    # A folder a training run has not made yet is told and served; a bad port stops it here.
    later = tmp_path / "later"
    res = rollscope("dashboard", "--checkpoint-root", later, "--port", "70000", "--store", path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 2, res.stderr
    assert lines[0] == (
        f"note: --checkpoint-root {later} does not exist (yet): Launch finds checkpoints in it "
        "once it does"
    )
    assert not path.exists()


def test_migrate_creates_then_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    first = rollscope("migrate", "--store", path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"store {path}: schema none (new store) -> {head_revision()}"
    again = rollscope("migrate", "--store", path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"store {path}: already at schema {head_revision()}"
    listed = rollscope("runs", "--store", path)
    assert listed.returncode == 0 and "no runs yet" in listed.stdout


def test_older_store_is_refused_until_migrated(tmp_path: Path, newer_code: Config) -> None:
    # In-process (CliRunner): the newer schema exists only in this process's migrations.
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    upgrade_only_to(url, newer_code, "0001")
    runner = CliRunner()
    before = files_beside(path)
    for args in (["runs"], ["show", "1"], ["export", "--run", RUN]):
        refused = runner.invoke(cli, [*args, "--store", url])
        assert refused.exit_code == 2
        lines = refused.output.strip().splitlines()
        assert lines == [
            "error: store at schema 0001, this rollscope needs 9001: "
            f"run `rollscope migrate --store {url}`"
        ]
    assert files_beside(path) == before
    migrated = runner.invoke(cli, ["migrate", "--store", url])
    assert migrated.exit_code == 0, migrated.output
    assert migrated.output.strip() == f"store {url}: schema 0001 -> 9001"
    again = runner.invoke(cli, ["migrate", "--store", url])
    assert again.output.strip() == f"store {url}: already at schema 9001"
    listed = runner.invoke(cli, ["runs", "--store", url])
    assert listed.exit_code == 0 and "no runs yet" in listed.output


def test_an_older_store_this_user_cannot_write_is_told_to_be_copied_first(
    tmp_path: Path,
) -> None:
    # `rollscope migrate` would be refused on it: the reader's line says what works.
    folder = tmp_path / "old"
    folder.mkdir()
    path = folder / "store.db"
    upgrade_only_to(f"sqlite:///{path}", storage_migrations.alembic_config(), "0022")
    view = tmp_path / "view"
    view.mkdir()
    res = run_read_only(folder, view, rollscope_cmd("runs", "--store", view / "store.db"), cwd=REPO)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: store at schema 0022, this rollscope needs {head_revision()}: it is on a "
        "read-only file system, so copy the store somewhere writable and run `rollscope "
        "migrate` on the copy"
    ]


def test_show_prompt_prints_each_steps_prompt_as_the_model_saw_it(recorded: Path) -> None:
    from rollout_core.prompts import get_system_prompt

    episode_id, question = first_episode(recorded)
    detail = Store(str(recorded), read_only=True).get_episode(episode_id)
    assert detail is not None and len(detail.steps) == 3
    plain = CliRunner().invoke(cli, ["show", str(episode_id), "--store", str(recorded)])
    shown = CliRunner().invoke(
        cli, ["show", str(episode_id), "--prompt", "--store", str(recorded)], terminal_width=400
    )
    assert plain.exit_code == shown.exit_code == 0, shown.output
    assert "[system]" not in plain.output
    system = get_system_prompt(detail.run.spec["environment"]["step_budget"]).splitlines()[0]
    # Every step's prompt starts over with the system prompt and the question: 3 steps, 3 times.
    assert shown.output.count(system) == 3
    assert shown.output.count(f"Question: {question}") == 3
    titles = [line for line in shown.output.splitlines() if " prompt: " in line]
    assert [t.split(" prompt: ")[1].split(" ")[0] for t in titles] == ["2", "4", "6"]
    # The last prompt holds the first step's output and observation, in order.
    last = shown.output.split("step 3 prompt")[1]
    first = detail.steps[0]
    assert last.index("[assistant]") < last.index(first.raw_output.splitlines()[0])
