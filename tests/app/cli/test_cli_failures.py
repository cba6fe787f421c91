"""Failures a user causes or meets end in one line naming the problem and the way out: a store
whose disk fills mid-run, bad input refused before a store is created, a file that is not a
store. A bug keeps its traceback (tests/app/cli/test_cli.py)."""

from __future__ import annotations

import json
import shlex
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.cli import in_process, rollscope_cmd
from tests.support.mounts import run_on_small_disk


def test_a_full_disk_mid_run_is_one_line_and_resume_completes_the_run(tmp_path: Path) -> None:
    disk, saved = tmp_path / "disk", tmp_path / "saved"
    disk.mkdir()
    saved.mkdir()
    store, filler = disk / "store.db", disk / "filler"
    run = rollscope_cmd("run", "--policy", "random", "--dataset", "demo", "--samples", "12",
                        "--name", "full", "--store", store, "--quiet")  # fmt: skip
    resume = rollscope_cmd("run", "--resume", "full", "--store", store, "--quiet")
    to = {name: shlex.quote(str(saved / name)) for name in ("run", "runs", "resume")}
    q = {"store": shlex.quote(str(store)), "disk": shlex.quote(str(disk)),
         "filler": shlex.quote(str(filler))}  # fmt: skip
    # The disk fills once the run has stored its first episodes, however fast the machine plays
    # them; the user frees space (deletes the filler) and resumes.
    finished = f"sqlite3 {q['store']} 'SELECT finished_episodes FROM runs' 2> /dev/null"
    script = f"""
        {shlex.join(run)} > {to["run"]}.out 2> {to["run"]}.err &
        pid=$!
        until [ "$({finished})" -gt 0 ] 2> /dev/null; do sleep 0.02; done
        dd if=/dev/zero of={q["filler"]} bs=64k 2> /dev/null
        wait $pid; echo $? > {to["run"]}.rc
        {shlex.join(rollscope_cmd("runs", "--json", "--store", store))} > {to["runs"]}.json
        rm {q["filler"]}
        {shlex.join(resume)} > {to["resume"]}.out 2> {to["resume"]}.err; echo $? > {to["resume"]}.rc
        cp {q["disk"]}/store.db* {shlex.quote(str(saved))}/
    """
    res = run_on_small_disk("64m", disk, ["sh", "-c", script], cwd=REPO)
    assert res.returncode == 0, res.stderr

    stderr = (saved / "run.err").read_text()
    assert (saved / "run.rc").read_text().strip() == "1", stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith("error: run 1 'full' stopped: the store's disk is full"), stderr
    assert "free space on that disk, then `rollscope run --resume full --store " in stderr
    [failed] = json.loads((saved / "runs.json").read_text())
    # A disk full to the last byte has no room for the status either: readers then see the run
    # as interrupted (its process is gone), which resumes the same way.
    assert failed["status"] in ("failed", "interrupted")
    assert 0 < failed["episodes_finished"] < failed["episodes_planned"], "it failed mid-run"

    assert (saved / "resume.rc").read_text().strip() == "0", (saved / "resume.err").read_text()
    with closing(sqlite3.connect(saved / "store.db")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT status, episodes_planned FROM runs").fetchall() == [
            ("completed", failed["episodes_planned"])
        ]
        count, keys = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT question_id || '/' || sample_index) FROM episodes"
        ).fetchone()
    assert count == keys == failed["episodes_planned"], "an episode missing or written twice"


def test_a_full_disk_under_a_write_outside_a_run_is_one_line(tmp_path: Path) -> None:
    disk, saved = tmp_path / "disk", tmp_path / "saved"
    disk.mkdir()
    saved.mkdir()
    store, filler = disk / "store.db", disk / "filler"
    err, rc = shlex.quote(str(saved / "tag.err")), shlex.quote(str(saved / "tag.rc"))
    setup = rollscope_cmd("run", "--limit", "2", "--name", "a", "--store", store, "--quiet")
    tag = rollscope_cmd("tag", "1", "wrong", "--note", "x" * 3000, "--store", store)
    # The store opens (its files have room) but the tag's write finds the disk full.
    script = f"""
        {shlex.join(setup)} > /dev/null || exit 9
        free=$(df -k {shlex.quote(str(disk))} | awk 'NR == 2 {{print $4}}')
        dd if=/dev/zero of={shlex.quote(str(filler))} bs=1k count=$((free - 64)) 2> /dev/null
        {shlex.join(tag)} 2> {err}; echo $? > {rc}
    """
    res = run_on_small_disk("2m", disk, ["sh", "-c", script], cwd=REPO)
    assert res.returncode == 0, res.stderr
    stderr = (saved / "tag.err").read_text()
    assert (saved / "tag.rc").read_text().strip() == "1", stderr
    assert stderr.strip() == (
        "error: the store's disk is full (database or disk is full): free space on that disk, "
        "then try again"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "no/such/questions.json"], "dataset not found: 'no/such/questions.json'"),
        (["--questions", "q.json", "--dataset", "demo"], "give a dataset or a questions file"),
        (["--dataset", "demo", "--db-dir", "dbs"], "the demo dataset brings its own databases"),
        (["--db-dir", "dbs"], "a database folder goes with a questions file: give --questions"),
        (["--limit", "1", "--question-id", "demo-library-01"],
         "give --limit or --question-id, not both"),
        (["--policy", "gpt9"], "unknown policy 'gpt9'"),
        (["--policy", "hf:/no/such/checkpoint"], "checkpoint not found"),
        (["--limit", "0"], "--limit must be at least 1, got 0"),
        (["--query-timeout", "0"], "--query-timeout must be more than 0 seconds, got 0.0"),
        (["--dtype", "fp8"], "--dtype 'fp8' is unknown (choose auto, bf16, fp16, fp32)"),
        (["--policy", "openai:http://127.0.0.1:9/v1", "--model", "m", "--request-timeout", "0"],
         "--request-timeout must be more than 0, got 0.0"),
        (["--ray", "local", "--workers", "1", "--gpus-per-worker", "-1"],
         "--gpus-per-worker must be 0 or more"),
        (["--run-id", "1", "--resume", "x"], "give --run-id or --resume, not both"),
    ],
)  # fmt: skip
def test_bad_run_input_is_one_line_and_creates_no_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = in_process(monkeypatch, capsys, "run", *args, "--store", "store.db", "--quiet")
    assert code == 2 and err.startswith("error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "bad input left a file behind"


def test_an_unknown_run_to_resume_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.db"
    assert in_process(monkeypatch, capsys, "migrate", "--store", store)[0] == 0
    code, err = in_process(monkeypatch, capsys, "run", "--resume", "nope", "--store", store)
    assert code == 2
    assert err.strip() == "error: no run 'nope' in the store (list them with `rollscope runs`)"


@pytest.mark.parametrize(
    "args",
    [["run", "--resume", "r1"], ["run", "--run-id", "3"], ["fork", "1", "--step", "1"],
     ["tag", "1", "wrong-join"]],
)  # fmt: skip
def test_a_command_on_recorded_episodes_creates_no_store_where_there_is_none(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    code, err = in_process(monkeypatch, capsys, *args, "--store", tmp_path / "typo.db")
    assert code == 2 and err.startswith(f"error: no store at {tmp_path / 'typo.db'}: "), err
    assert err.strip().endswith("(check --store)") and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_store_is_one_line_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for command in (["run", "--limit", "1", "--quiet"], ["runs"], ["tag", "1", "x"]):
        code, err = in_process(monkeypatch, capsys, *command, "--store", notes)
        assert code == 2 and "file is not a database" in err, err
        assert len(err.strip().splitlines()) == 1
    assert notes.read_text() == "my notes\n"


@pytest.mark.parametrize(
    "args",
    [["show", "9" * 20], ["tag", "9" * 20, "x"]],
)  # fmt: skip
def test_a_number_past_what_the_store_holds_is_one_line_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    # Each went to the driver and raised OverflowError with its traceback.
    store = tmp_path / "s.db"
    assert in_process(monkeypatch, capsys, "migrate", "--store", store)[0] == 0
    code, err = in_process(monkeypatch, capsys, *args, "--store", store)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    held = "ids up to 9,223,372,036,854,775,807; steps and counts up to 2,147,483,647"
    assert err.startswith(f"error: a number given is past what the store holds ({held})"), err
    with closing(sqlite3.connect(store)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_run_named_by_a_digit_int_cannot_read_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.db"
    assert in_process(monkeypatch, capsys, "migrate", "--store", store)[0] == 0
    # ValueError and OverflowError before; a byte that is not UTF-8 (as Python reads it from
    # the command line) raised UnicodeEncodeError from the driver.
    for ref in ("²", "9" * 20, "run\udcff"):
        for command in ("export", "tags"):
            code, err = in_process(monkeypatch, capsys, command, "--run", ref, "--store", store)
            assert code == 2
            assert err.strip() == (
                f"error: no run {ref!r} in the store (list them with `rollscope runs`)"
            )


def test_an_output_name_past_the_file_systems_length_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.db"
    assert in_process(monkeypatch, capsys, "migrate", "--store", store)[0] == 0
    output = tmp_path / ("o" * 300 + ".jsonl")  # OSError before
    code, err = in_process(
        monkeypatch, capsys, "export", "--all", "--output", output, "--store", store
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "cannot be used (File name too long)" in err
