"""`rollscope import` as a user runs it: the summary, and one line for every refusal."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.app.cli.test_cli import rollscope
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.cli import in_process, rollscope_here, rollscope_in_terminal


def _dump(root: Path) -> Path:
    output = sql_response([("<sql>SELECT 1</sql>", "1"), ("<solution>SELECT 1</solution>", None)])
    verl_dump(root, 1, [sql_prompt("Q?")] * 2, [output] * 2, ["SELECT 1"] * 2, [1.0, 0.0], {})
    return root


def _one_line_error(done: object, *needles: str) -> None:
    assert done.returncode == 2, done.stderr  # type: ignore[attr-defined]
    err = done.stderr.strip()  # type: ignore[attr-defined]
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for needle in needles:
        assert needle in err, err


def test_import_then_runs_shows_the_run_and_its_source(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    done = rollscope("import", _dump(tmp_path / "dump"), "--name", "v", "--store", db)
    assert done.returncode == 0, done.stderr
    assert "1.jsonl: 2 episodes" in done.stderr
    assert "run 1 'v': 2 episodes from 1 verl rollout dump file in" in done.stdout
    listed = rollscope("runs", "--store", db, "--json")
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert (run["kind"], run["source_format"], run["episodes_finished"]) == ("import", "verl", 2)
    # The file names no database: `show` says none rather than "db " and nothing.
    shown = rollscope("show", "1", "--store", db)
    assert shown.returncode == 0, shown.stderr
    head, question, label, gold = shown.stdout.splitlines()[:4]
    assert head.startswith("episode 1  run v  question q-") and head.endswith("#0")
    assert (question, label, gold.strip()) == ("Database: concerts. Q?", "gold SQL:", "SELECT 1")
    # Each step's action with what it ran, which sits inside the output's tags, and what came
    # back, labelled.
    shown_lines = [line.strip("│ ") for line in shown.stdout.splitlines()]
    assert shown_lines.count("action: QUERY SELECT 1") == 1
    assert shown_lines.count("observation: 1") == 1
    assert shown_lines.count("action: ANSWER SELECT 1") == 1
    # A chat log holds no gold SQL: no label over an empty block.
    log = tmp_path / "chat.jsonl"
    line = {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "4"}],
            "reward": 1.0}  # fmt: skip
    log.write_text(json.dumps(line) + "\n")
    assert rollscope("import", log, "--name", "chat", "--store", db).returncode == 0
    shown = rollscope("show", "3", "--store", db)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == "Q?" and "gold SQL" not in shown.stdout


def test_a_trainers_validation_files_import_as_the_evaluation_of_its_training(
    tmp_path: Path,
) -> None:
    from rollout_core.records import RunSpec
    from storage.store import Store

    db = tmp_path / "s.db"
    dump = _dump(tmp_path / "val")
    bad = rollscope("import", dump, "--name", "v-val", "--store", db, "--evaluation-of", " ")
    _one_line_error(bad, "--evaluation-of: the run name is empty")
    assert not db.exists()
    done = rollscope("import", dump, "--name", "v-val", "--store", db, "--evaluation-of", "v")
    assert done.returncode == 0, done.stderr
    store = Store(str(db))
    found = store.run_named("v-val")
    assert found is not None and RunSpec.from_stored(found.spec).evaluation_of == "v"
    store.close()


def test_runs_says_how_many_bad_lines_an_import_left_out(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    dump = _dump(tmp_path / "dump")
    (step_file,) = dump.glob("*.jsonl")
    step_file.write_text("{not json\n" + step_file.read_text())
    assert rollscope("import", dump, "--name", "v", "--store", db).returncode == 0
    assert rollscope("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1",
                     "--name", "played", "--store", db).returncode == 0  # fmt: skip
    listed = rollscope("runs", "--store", db, env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[-1].strip() == "bad lines skipped by imports: v 1"
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines]
    cells = {row[1]: row[5] for row in rows if row[0].isdecimal()}  # id, name, ..., episodes
    # An import's count has no plan behind it; a played run's is finished of planned.
    assert cells == {"played": "1/1", "v": "2"}


def test_refusals_are_one_line_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"

    def refused(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return rollscope_here(monkeypatch, capsys, "import", *args)

    _one_line_error(
        rollscope("import", tmp_path / "nowhere", "--name", "x", "--store", db),
        "does not exist",
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    _one_line_error(
        refused(tmp_path / "empty", "--name", "x", "--store", db),
        "cannot tell the format of",
        "--format",
    )
    # A first line nested past the stack of Python's json: a RecursionError.
    (tmp_path / "deep.jsonl").write_text("[" * 5_000 + "]" * 5_000 + "\n")
    _one_line_error(
        refused(tmp_path / "deep.jsonl", "--name", "x", "--store", db),
        "cannot tell the format of",
    )
    _one_line_error(
        refused(tmp_path / "empty", "--name", "x", "--format", "csv", "--store", db),
        "unknown format 'csv'",
    )
    _one_line_error(
        refused(_dump(tmp_path / "d"), "--name", "x", "--db-dir", "db", "--store", db),
        "--db-dir goes with --questions",
    )
    # A wait of NaN seconds returned at once (a busy loop); one past time_t, a traceback.
    for poll in ("nan", "inf", "0"):
        _one_line_error(
            refused(tmp_path / "d", "--name", "x", "--follow", "--poll", poll, "--store", db),
            "--poll must be above 0 and at most 3600 seconds",
        )
    # No reward is at least NaN: every rollout would have read wrong.
    _one_line_error(
        refused(tmp_path / "d", "--name", "x", "--correct-at", "nan", "--store", db),
        "--correct-at must be a finite number",
    )
    # Listed, and the questions read, before a store is made.
    _one_line_error(
        refused(tmp_path / "empty", "--name", "x", "--format", "verl", "--store", db),
        "no verl rollout dump files in",
    )
    _one_line_error(
        refused(
            tmp_path / "d", "--name", "x", "--questions", tmp_path / "none.json", "--store", db
        ),
        "dataset not found",
    )
    # A pipe (`<(zcat ...)`): an import reads its files again, so it takes files alone.
    os.mkfifo(tmp_path / "pipe")
    _one_line_error(
        refused(tmp_path / "pipe", "--name", "x", "--store", db),
        "is not a file or folder (a pipe?); write the rollouts to a file and import that",
    )
    assert not db.exists()


def test_a_name_taken_by_another_run_or_source_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert rollscope("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1",
                     "--name", "mine", "--store", db, "--quiet").returncode == 0  # fmt: skip
    _one_line_error(
        rollscope("import", _dump(tmp_path / "d"), "--name", "mine", "--store", db),
        "run 'mine' is a batch run, not an import; import under another --name",
    )
    assert rollscope("import", tmp_path / "d", "--name", "imp", "--store", db).returncode == 0
    _one_line_error(
        rollscope("import", _dump(tmp_path / "other"), "--name", "imp", "--store", db),
        "import these under another --name",
    )


def test_strict_names_the_file_and_line(tmp_path: Path) -> None:
    dump = _dump(tmp_path / "d")
    with (dump / "1.jsonl").open("a") as f:
        f.write("{broken\n")
    done = rollscope("import", dump, "--name", "s", "--strict", "--store", tmp_path / "s.db")
    _one_line_error(done, "1.jsonl:3: not JSON", "--strict stops at a bad line")


def test_paths_and_values_are_printed_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Square brackets are the terminal library's markup: a folder named `run[/b]` crashed it.
    for name in ("sweep[red]lr", "run[/b]"):
        code, said = in_process(monkeypatch, capsys, "import", tmp_path / name, "--name", "x",
                                "--store", tmp_path / "s.db")  # fmt: skip
        assert code == 2 and f"{tmp_path / name} does not exist" in said, said


def test_a_format_with_no_files_there_makes_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = _dump(tmp_path / "d"), tmp_path / "s.db"
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "x", "--format",
                            "skyrl", "--store", db)  # fmt: skip
    assert code == 2 and f"no SkyRL evaluation dump files in {dump}" in said, said
    assert "it reads dumped_evals/global_step_<N>_evals/<data_source>.jsonl; found 1.jsonl;" in said
    assert "check the path and --format" in said
    # Nothing holds the name: the right format imports under it.
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "x", "--store", db)
    assert code == 0, said


def test_a_run_name_must_be_text_that_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dump, db = _dump(tmp_path / "d"), tmp_path / "s.db"
    too_long = ("x" * 201, "is 201 characters long; the store keeps at most 200")
    for name, problem in (("  ", "the run name is empty"), too_long):
        code, said = in_process(monkeypatch, capsys, "import", dump, "--name", name,
                                "--store", db)  # fmt: skip
        assert code == 2 and problem in said, said
    assert not db.exists()


def test_sigterm_stops_an_import_as_ctrl_c_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.importers import importer as importer_module
    from app.importers.importer import Importer

    dump, db = tmp_path / "d", tmp_path / "s.db"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    for step in (1, 2, 3):
        verl_dump(dump, step, [sql_prompt(f"Q{step}?")], [output], ["SELECT 1"], [1.0], {})
    take, before = Importer._take, signal.getsignal(signal.SIGTERM)

    def stopped_at_the_second(self: Importer, path: Path) -> object:
        if path.name == "2.jsonl":
            os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, as the file begins
        return take(self, path)

    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 1)  # a file a group
    monkeypatch.setattr(Importer, "_take", stopped_at_the_second)
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "v", "--store", db)
    assert code == 130, said
    assert "stopped: importing again under --name 'v' reads on from here" in said
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT status, error FROM runs").fetchall() == [
            ("cancelled", "stopped by SIGTERM")
        ]
        assert conn.execute("SELECT count(*) FROM episodes").fetchone() == (1,)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_sigterm_inside_a_write_lets_the_write_finish_then_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stop raised where the signal lands cut a batch's transaction in two; the batch is now
    # written and the import stops before its next row, with the store free for the run's
    # status.
    from app.importers import importer as importer_module
    from storage import sink as sink_module

    dump, db = tmp_path / "d", tmp_path / "s.db"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(dump, 1, [sql_prompt(f"Q{i}?") for i in range(3)], [output] * 3, ["SELECT 1"] * 3,
              [1.0] * 3, {})  # fmt: skip
    write_batch = sink_module.write_batch

    def signalled(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # inside the batch's transaction
        return write_batch(*args, **kwargs)

    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 1)
    monkeypatch.setattr(sink_module, "write_batch", signalled)
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "v", "--store", db)
    assert code == 130 and "stopped: importing again" in said, said
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT status, error FROM runs").fetchall() == [
            ("cancelled", "stopped by SIGTERM")
        ]
        assert conn.execute("SELECT count(*), count(outcome) FROM episodes").fetchone() == (1, 1)
    monkeypatch.setattr(sink_module, "write_batch", write_batch)
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "v", "--store", db)
    assert code == 0, said
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*), count(outcome) FROM episodes").fetchone() == (3, 3)


def test_a_sigterm_once_the_files_are_in_leaves_the_import_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.importers.importer import Importer

    dump, db = tmp_path / "d", tmp_path / "s.db"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    verl_dump(dump, 1, [sql_prompt("Q?")], [output], ["SELECT 1"], [1.0], {})
    finish = Importer.finish

    def signalled(self: Importer, status: Any, error: str | None = None) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # as the run is marked completed
        finish(self, status, error)

    monkeypatch.setattr(Importer, "finish", signalled)
    code, said = in_process(monkeypatch, capsys, "import", dump, "--name", "v", "--store", db)
    assert code == 0, said
    assert "SIGTERM came after the last file was in: the import is complete" in said
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("completed",)]


def test_a_stop_mid_group_tells_only_the_files_whose_episodes_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.importers import importer as importer_module
    from app.importers.importer import Importer

    dump, db = tmp_path / "d", tmp_path / "s.db"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    for step in (1, 2, 3, 4):
        verl_dump(dump, step, [sql_prompt(f"Q{step}?")], [output], ["SELECT 1"], [1.0], {})
    read = Importer._read

    def stopped_in_the_fourth(self: Importer, taken: Any, *args: Any) -> Any:
        if taken.path.name == "4.jsonl":
            os.kill(os.getpid(), signal.SIGTERM)
        return read(self, taken, *args)

    # Groups of two files: the second group is stopped with the third file's episode in hand.
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 2)
    monkeypatch.setattr(Importer, "_read", stopped_in_the_fourth)
    from app import cli

    monkeypatch.setattr(sys, "argv", ["rollscope", "import", str(dump), "--name", "v",
                                      "--store", str(db)])  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        cli.main()
    said = capsys.readouterr()
    assert exited.value.code == 130, said.err
    # The summary names the files whose episodes are in; the third is read again next time.
    assert "2 episodes from 2 verl" in said.out, said.out
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM episodes").fetchone() == (2,)


def test_a_file_that_cannot_be_read_is_called_that(tmp_path: Path) -> None:
    import pandas as pd

    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    (completions / "completions_00002.parquet").write_bytes(b"PAR1 this is no parquet PAR1")
    db = tmp_path / "s.db"
    done = rollscope("import", tmp_path / "out", "--name", "t", "--store", db)
    assert done.returncode == 2, done.stderr
    assert "completions/completions_00002.parquet: could not be read, skipped" in done.stderr
    assert "no rollout in" in done.stderr and "no file could be read (1 file; first:" in done.stderr
    # Beside a good file: the run has its episodes, and the summary tells the file apart
    # from bad lines.
    pd.DataFrame(
        {
            "step": [1],
            "prompt": [[{"role": "user", "content": "Q?"}]],
            "completion": [[{"role": "assistant", "content": "<solution>SELECT 1</solution>"}]],
            "exact": [1.0],
            "advantage": [0.0],
        }
    ).to_parquet(completions / "completions_00001.parquet")
    done = rollscope("import", tmp_path / "out", "--name", "t", "--store", db)
    assert done.returncode == 0, done.stderr
    assert "1 episode from 2 TRL" in done.stdout, done.stdout
    assert "; 1 file that could not be read skipped (counted on the run)" in done.stdout


def test_follow_waits_for_a_folder_the_trainer_has_not_made_yet(tmp_path: Path) -> None:
    # verl makes its rollout folder with its first step's file: a follow started beside the
    # trainer waits for it, then imports what lands there.
    import threading
    import time

    dump, db = tmp_path / "checkpoints" / "rollouts", tmp_path / "s.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "import", str(dump), "--name", "live", "--store",
         str(db), "--follow", "--poll", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: said.extend(proc.stderr or ()), daemon=True)
    reader.start()

    def wait_for(what: str, done: Callable[[], bool]) -> None:
        began = time.monotonic()
        while not done():
            assert time.monotonic() - began < 60, f"no {what} in 60 s: {''.join(said)}"
            assert proc.poll() is None, "".join(said)
            time.sleep(0.2)

    try:
        # Under load the follower takes seconds to start: the folder is made once it waits.
        wait_for("wait", lambda: any("waiting for the trainer" in line for line in said))
        _dump(dump)
        wait_for("import", lambda: any("1.jsonl: 2 episodes" in line for line in said))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    err = "".join(said)
    assert proc.returncode == 130, err
    assert f"waiting for the trainer to make {dump} ..." in err
    assert _finished(db) == 2


def _finished(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        try:
            return conn.execute("SELECT coalesce(sum(finished_episodes), 0) FROM runs").fetchone()[
                0
            ]
        except sqlite3.OperationalError:  # the store is being made
            return 0


def test_a_verl_folder_of_renamed_dumps_imports_by_each_lines_step(tmp_path: Path) -> None:
    dump, db = _dump(tmp_path / "d"), tmp_path / "s.db"
    (dump / "1.jsonl").rename(dump / "step-0003 copy.jsonl")
    done = rollscope("import", dump, "--name", "v", "--store", db)
    assert done.returncode == 0, done.stderr
    assert "step-0003 copy.jsonl: 2 episodes" in done.stderr


def test_empty_files_make_no_run(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "1.jsonl").write_text("")
    (tmp_path / "d" / "2.jsonl").write_text("\n  \n")
    db = tmp_path / "s.db"
    done = rollscope("import", tmp_path / "d", "--name", "v", "--store", db)
    assert done.returncode == 2, done.stderr
    assert "error: no rollout in" in done.stderr and "its 2 files hold no line" in done.stderr
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_importing_again_says_nothing_is_new(tmp_path: Path) -> None:
    dump, db = _dump(tmp_path / "d"), tmp_path / "s.db"
    assert rollscope("import", dump, "--name", "v", "--store", db).returncode == 0
    again = rollscope("import", dump, "--name", "v", "--store", db)
    assert again.returncode == 0, again.stderr
    assert "run 1 'v': nothing new (1 file imported before)" in again.stdout
    # A new file the run cannot read: the hint is about the file, not the format.
    (dump / "2.jsonl").write_text("{cut\n")
    broken = rollscope("import", dump, "--name", "v", "--store", db)
    assert broken.returncode == 2, broken.stderr
    assert "the run's earlier files read as verl: check these" in broken.stderr
    assert "check --format" not in broken.stderr


def test_the_summary_counts_the_episodes_re_graded(tmp_path: Path) -> None:
    from tests.support.benchmark import QUESTIONS, make_benchmark

    questions, db_dir = make_benchmark(tmp_path / "bench")
    _, question, gold = QUESTIONS[0]
    output = sql_response([(f"<solution>{gold}</solution>", None)])
    verl_dump(tmp_path / "d", 1, [sql_prompt(question)] * 2, [output] * 2, [gold] * 2,
              [1.0, 1.0], {})  # fmt: skip
    done = rollscope("import", tmp_path / "d", "--name", "v", "--store", tmp_path / "s.db",
                     "--questions", questions, "--db-dir", db_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "; 2 episodes re-graded against --questions" in done.stdout, done.stdout


def test_an_rllm_log_is_told_a_line_a_step_folder_with_bad_files_on_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.app.importers.test_other_formats import _rllm_episode
    from tests.app.importers.writers import rllm_log_episode

    logs, db = tmp_path / "logs", tmp_path / "s.db"
    for step in (1, 2):
        for sample in range(3):
            rllm_log_episode(logs, _rllm_episode(f"task-{step}", sample, sample == 0), step)
    broken = logs / "episodes" / "train_step_2_epoch_0" / "episode_broken.json"
    broken.write_text("{not json\n")
    code, said = in_process(monkeypatch, capsys, "import", logs, "--name", "r", "--store", db)
    assert code == 0, said
    # The bad file's problem is told with its own line, after the folder read before it (the
    # two folders' files are read as one group, and told once its episodes are written).
    lines = [line for line in said.splitlines() if "episodes/" in line]
    assert lines == [
        "episodes/train_step_1_epoch_0/: 3 files, 3 episodes",
        "skipped episodes/train_step_2_epoch_0/episode_broken.json:1: not JSON (Expecting "
        "property name enclosed in double quotes at column 2)",
        "episodes/train_step_2_epoch_0/episode_broken.json: 0 episodes, 1 bad line skipped",
        "episodes/train_step_2_epoch_0/: 3 files, 3 episodes",
    ]
    code, said = in_process(monkeypatch, capsys, "import", logs, "--name", "r", "--store", db)
    lines = [line for line in said.splitlines() if line.startswith("episodes/")]
    assert code == 0 and lines[0] == (
        "episodes/train_step_1_epoch_0/: 3 files imported before, left as they are"
    ), said


def test_at_a_terminal_a_bar_follows_the_import_then_gives_way_to_the_summary(
    tmp_path: Path,
) -> None:
    dump = tmp_path / "d"
    output = sql_response([("<solution>SELECT 1</solution>", None)])
    for step in (1, 2, 3):
        verl_dump(dump, step, [sql_prompt(f"Q{step}?")] * 2, [output] * 2, ["SELECT 1"] * 2,
                  [1.0, 0.0], {})  # fmt: skip
    code, shown = rollscope_in_terminal("import", dump, "--name", "v", "--store", tmp_path / "s.db")
    assert code == 0, shown
    *_, last_bar = shown.split("importing 'v'")
    # Its last state: every byte read, every file and episode counted...
    assert "100%" in last_bar and "3/3 files · 6 episodes" in last_bar, shown
    # ...then the line is erased, and the files' lines and the summary stay.
    after = last_bar.partition("\x1b[2K")[2]
    assert "3.jsonl: 2 episodes" in shown and "run 1 'v': 6 episodes from 3" in after, shown
    # In a pipe or a log there is no bar: the files' lines alone.
    piped = rollscope("import", dump, "--name", "w", "--store", tmp_path / "s.db")
    assert piped.returncode == 0 and "importing" not in piped.stderr, piped.stderr
