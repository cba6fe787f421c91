"""`rollscope import` as a user runs it: the summary, and one line for every refusal."""

from __future__ import annotations

import json
from pathlib import Path

from tests.app.cli.test_cli import rollscope
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump


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


def test_refusals_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _one_line_error(
        rollscope("import", tmp_path / "nowhere", "--name", "x", "--store", db),
        "does not exist",
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    _one_line_error(
        rollscope("import", tmp_path / "empty", "--name", "x", "--store", db),
        "cannot tell the format of",
        "--format",
    )
    _one_line_error(
        rollscope("import", tmp_path / "empty", "--name", "x", "--format", "csv", "--store", db),
        "unknown format 'csv'",
    )
    _one_line_error(
        rollscope("import", _dump(tmp_path / "d"), "--name", "x", "--db-dir", "db", "--store", db),
        "--db-dir goes with --questions",
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
