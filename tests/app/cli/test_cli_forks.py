"""`rollscope fork`, `tag` and `tags` as a user runs them: real subprocesses, a real store."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.benchmark import make_benchmark
from tests.support.cli import in_process, rollscope, rollscope_cmd, rollscope_here
from tests.support.mounts import run_read_only


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one `random` run named `rnd` (the fixture questions, 2 samples)."""
    root = tmp_path_factory.mktemp("forks")
    questions, db_dir = make_benchmark(root / "bench")
    store = root / "store.db"
    res = rollscope(
        "run", "--policy", "random", "--questions", questions, "--db-dir", db_dir,
        "--samples", "2", "--name", "rnd", "--store", store, "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return store


def _copy(recorded: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "store.db"
    with closing(sqlite3.connect(recorded)) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    return path


def _rows(store: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(store)) as conn:
        return conn.execute(sql).fetchall()


def test_fork_one_episode_from_the_shell(recorded: Path, tmp_path: Path) -> None:
    store = _copy(recorded, tmp_path)
    ((episode,),) = _rows(store, "SELECT id FROM episodes WHERE steps >= 3 LIMIT 1")
    res = rollscope("fork", str(episode), "--step", "3", "--policy", "oracle", "--store", store,
                    "--name", "rescue", "--quiet")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "run 2 'rescue': 1 episode in" in res.stdout
    ((kind, spec),) = _rows(store, "SELECT kind, spec FROM runs WHERE name = 'rescue'")
    fork = json.loads(str(spec))["fork"]
    assert kind == "fork" and fork["source_run"] == "rnd" and fork["rule"] == "step"
    assert [(p["episode_id"], p["step"]) for p in fork["points"]] == [(episode, 3)]
    ((new_id, forked_from, fork_step, outcome),) = _rows(
        store, "SELECT id, forked_from, fork_step, outcome FROM episodes WHERE run_id = 2"
    )
    assert (forked_from, fork_step, outcome) == (episode, 3, "correct")
    replayed = _rows(
        store, f"SELECT replayed FROM steps WHERE episode_id = {new_id} ORDER BY step_no"
    )
    assert [bool(r) for (r,) in replayed][:3] == [True, True, False]
    shown = rollscope("show", str(new_id), "--store", store)
    assert f"fork of episode {episode}: steps before 3 replayed" in shown.stdout


def test_fork_every_failed_episode_at_its_first_error(recorded: Path, tmp_path: Path) -> None:
    store = _copy(recorded, tmp_path)
    failed = _rows(store, "SELECT count(*) FROM episodes WHERE outcome != 'correct'")[0][0]
    res = rollscope("fork", "--run", "rnd", "--at", "first-error", "--policy", "oracle",
                    "--store", store, "--quiet")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"forking {failed} of {failed} failed episodes of run 'rnd'" in res.stderr
    rows = _rows(store, "SELECT outcome, forked_from FROM episodes WHERE run_id = 2")
    assert len(rows) == failed and {o for o, _ in rows} == {"correct"}
    assert len({f for _, f in rows}) == failed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name what to fork: an EPISODE with --step K, or --run RUN --at first-error"),
        (("1",), "--step K is needed"),
        (("1", "--step", "0"), "--step must be between 1 and"),
        (("1", "--step", "2", "--run", "rnd"), "give an EPISODE or --run, not both"),
        (("--run", "rnd"), "--run needs --at first-error"),
        (("--run", "rnd", "--at", "last-error"), "--run needs --at first-error (got 'last-error')"),
        (("--run", "nope", "--at", "first-error"), "no run 'nope' in the store"),
        (("1", "--step", "1", "--temperature", "-1"), "--temperature must be between"),
        (("1", "--step", "1", "--policy", "hf:/no/such/dir"), "checkpoint not found"),
        (("999999", "--step", "1"), "no episode 999999 in the store"),
        (("1", "--step", "1", "--samples", "0"), "--samples must be at least 1"),
        (("1", "--step", "1", "--name", "rnd"), "a run named 'rnd' already exists"),
    ],
)
def test_bad_fork_input_is_one_line_and_writes_nothing(
    recorded: Path,
    tmp_path: Path,
    args: tuple[str, ...],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = _copy(recorded, tmp_path)
    code, err = in_process(monkeypatch, capsys, "fork", *args, "--store", store)
    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _rows(store, "SELECT count(*) FROM runs") == [(1,)]


def test_tag_list_and_remove_from_the_shell(recorded: Path, tmp_path: Path) -> None:
    store = _copy(recorded, tmp_path)
    res = rollscope("tag", "1", "wrong-join", "--note", "joined on name", "--store", store,
                    "--author", "ada")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "episode 1: tagged 'wrong-join'" in res.stdout
    assert rollscope("tag", "1", "wrong-join", "--step", "1", "--store", store).returncode == 0
    assert rollscope("tag", "2", "wrong-join", "--store", store).returncode == 0
    counts = json.loads(rollscope("tags", "--store", store, "--json").stdout)
    assert counts == [{"tag": "wrong-join", "episodes": 2}]
    listed = json.loads(rollscope("tags", "--tag", "wrong-join", "--run", "rnd", "--json",
                                  "--store", store).stdout)  # fmt: skip
    assert [r["episode_id"] for r in listed] == [1, 2]
    notes = {(a["step"], a["note"], a["author"]) for a in listed[0]["annotations"]}
    assert (None, "joined on name", "ada") in notes
    shown = rollscope("show", "1", "--store", store)
    assert "tag wrong-join" in shown.stdout and "joined on name" in shown.stdout
    res = rollscope("tag", "1", "wrong-join", "--step", "1", "--remove", "--store", store)
    assert res.returncode == 0 and "removed 'wrong-join'" in res.stdout
    assert _rows(store, "SELECT count(*) FROM annotations") == [(2,)]


def test_a_tag_that_looks_like_markup_is_printed_as_it_is(recorded: Path, tmp_path: Path) -> None:
    # Rich read "[red]x[/red]" as markup: `tagged 'x'`, and a table of tags showed "x".
    store = _copy(recorded, tmp_path)
    res = rollscope("tag", "1", "[red]x[/red]", "--store", store)
    assert res.returncode == 0, res.stderr
    assert "episode 1: tagged '[red]x[/red]'" in res.stdout
    assert "[red]x[/red]" in rollscope("tags", "--store", store).stdout
    res = rollscope("tag", "1", "[b]never[/b]", "--remove", "--store", store)
    assert res.returncode == 2 and "no tag '[b]never[/b]'" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("1", ""), "the tag is empty"),
        (("1", "x", "--step", "99"), "choose a step from 1 to"),
        (("99999", "x"), "no episode 99999 in the store"),
        (("1", "never-set", "--remove"), "episode 1 has no tag 'never-set'"),
        (("1", "x", "--remove", "--note", "n"), "--remove takes a tag off; it has no --note"),
        (("1", "x\udcff"), "the tag holds a line break, a control character or a byte that"),
    ],
)
def test_bad_tag_input_is_one_line(
    recorded: Path,
    tmp_path: Path,
    args: tuple[str, ...],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = _copy(recorded, tmp_path)
    res = rollscope_here(monkeypatch, capsys, "tag", *args, "--store", store)
    assert res.returncode == 2 and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert _rows(store, "SELECT count(*) FROM annotations") == [(0,)]


@pytest.mark.parametrize(
    "args",
    [
        ("tag", "1", "x"),
        ("fork", "1", "--step", "1", "--policy", "oracle"),
        ("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1"),
    ],
)
def test_writes_on_a_read_only_file_system_are_refused_in_one_line(
    recorded: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    store = _copy(recorded, tmp_path / "src")
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    view = tmp_path / "view"
    view.mkdir()
    res = run_read_only(
        store.parent, view, rollscope_cmd(*args, "--store", view / "store.db"), cwd=REPO
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: ")
    # Why, and what to do: SQLite's own words ("unable to open database file") say neither.
    assert "it is on a read-only file system" in res.stderr, res.stderr
    assert "use a command that only reads it" in res.stderr
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--policy", "oracle", "--dataset", "demo", "--limit", "1"),
        # Said before the policy is built: not that no server answers.
        ("run", "--policy", "openai:http://127.0.0.1:9/v1", "--model", "m", "--limit", "1"),
        ("migrate",),
    ],
)
def test_a_new_store_in_a_read_only_folder_is_refused_in_one_line(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "src").mkdir()
    view = tmp_path / "view"
    view.mkdir()
    res = run_read_only(
        tmp_path / "src", view, rollscope_cmd(*args, "--store", view / "new.db"), cwd=REPO
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == (
        f"error: cannot create store '{view / 'new.db'}': it is on a read-only file system; "
        "name a store in a folder this user can write"
    )
    assert not list((tmp_path / "src").iterdir())


def test_a_tag_listed_that_no_tag_could_be_is_refused_in_one_line(
    recorded: Path, tmp_path: Path
) -> None:
    # A byte that is not UTF-8 raised UnicodeEncodeError from the driver.
    res = rollscope("tags", "--tag", "x\udcff", "--store", _copy(recorded, tmp_path))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "the tag holds a line break, a control character or a byte that" in res.stderr
