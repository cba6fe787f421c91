"""Bad input anywhere in `rollscope run`: one line naming the fix, non-zero, store untouched.

"Untouched" compares every row of the store's tables: opening a store may refresh SQLite's
planner statistics (`Store.optimize`), which changes the file's bytes but no data.

Extends tests/app/cli/test_cli.py (missing questions file, zero budgets, unknown policy or question,
missing database, unreachable store), which these cases do not repeat.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from rollout_core.records import EpisodeRecord, EpisodeStart, IterationBatch, RunSpec, StepRecord
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.robustness.helpers import store_digest, table_counts
from tests.support.benchmark import make_benchmark
from tests.support.cli import rollscope, rollscope_here
from tests.support.stores import write_run


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(store with one finished run, questions file, db dir), built once for the module."""
    root = tmp_path_factory.mktemp("seeded")
    questions, db_dir = make_benchmark(root / "bench")
    store = root / "seed.db"
    res = rollscope(
        "run", "--questions", questions, "--db-dir", db_dir, "--store", store,
        "--name", "done-run", "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert not Path(f"{store}-wal").exists() or Path(f"{store}-wal").stat().st_size == 0
    return store, questions, db_dir


@pytest.fixture()
def store_copy(seeded: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "store.db"
    shutil.copyfile(seeded[0], copy)
    return copy


def _assert_one_line_failure(
    res: subprocess.CompletedProcess[str],
    expected: str,
    store: Path | None = None,
    before: tuple[str, dict[str, int]] | None = None,
) -> None:
    """Non-zero exit, one stderr line holding `expected`, no traceback, the store unchanged."""
    assert res.returncode not in (0, None), f"exit {res.returncode}: {res.stdout[-500:]}"
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{res.stderr}"
    assert expected.lower() in lines[0].lower(), lines[0]
    if store is not None and before is not None:
        assert (store_digest(store), table_counts(store)) == before, "the store changed"


def _bench_files(tmp_path: Path, seeded: tuple[Path, Path, Path]) -> dict[str, Path]:
    """Broken questions files and database folders, each next to a good copy of the rest."""
    questions = seeded[1]
    items = json.loads(questions.read_text())
    files = {
        "not_json": "not json at all {",
        "a_dict": json.dumps({"questions": items}),
        "empty_list": "[]",
        "no_query": json.dumps([{"db_id": "concerts", "question": "How many?"}]),
        "no_db_id": json.dumps([{"question": "How many?", "query": "SELECT 1"}]),
        "number_question": json.dumps([{"db_id": "concerts", "question": 5, "query": "SELECT 1"}]),
        "not_objects": json.dumps(["SELECT 1"]),
        # Ids the store cannot key on: PostgreSQL refuses them, SQLite would keep them.
        "long_id": json.dumps([{**items[0], "id": "q" * 201}]),
        "nul_id": json.dumps([{**items[0], "id": "q\x00"}]),
        "long_db_id": json.dumps([{**items[0], "db_id": "d" * 201}]),
        "surrogate_db_id": json.dumps([{**items[0], "db_id": "d\ud800"}]),  # a \ud800 escape
    }
    out = {}
    for name, content in files.items():
        path = tmp_path / f"{name}.json"
        path.write_text(content)
        out[name] = path
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(json.dumps(items).encode().replace(b"How", b"H\xf6w"))
    out["not_utf8"] = latin1
    for name, raw in {
        "text_db": b"this is not a database\n",
        "corrupt_db": b"SQLite format 3\x00" + bytes(range(256)) * 16,
        "empty_db": b"",
    }.items():
        folder = tmp_path / name / "concerts"
        folder.mkdir(parents=True)
        (folder / "concerts.sqlite").write_bytes(raw)
        out[name] = tmp_path / name
    return out


QUESTION_CASES = [
    ("not_json", None, "not valid JSON"),
    ("a_dict", None, "JSON list"),
    ("empty_list", None, "no questions"),
    ("no_query", None, "query"),
    ("no_db_id", None, "db_id"),
    ("number_question", None, "question"),
    ("not_objects", None, "not a JSON object"),
    ("not_utf8", None, "UTF-8"),
    ("long_id", None, "has an 'id' that is 201 characters long; the store keeps at most 200"),
    ("nul_id", None, "has an 'id' that holds a NUL character"),
    ("long_db_id", None, "has a db_id that is 201 characters long"),
    ("surrogate_db_id", None, "uses db_id 'd\ufffd' but"),  # read as the importers read it
    (None, "text_db", "not a SQLite database"),
    (None, "empty_db", "concerts.sqlite"),
    (None, "corrupt_db", "concerts.sqlite"),
]


@pytest.mark.parametrize(("questions_case", "db_case", "expected"), QUESTION_CASES)
def test_broken_questions_or_databases(
    questions_case: str | None,
    db_case: str | None,
    expected: str,
    seeded: tuple[Path, Path, Path],
    store_copy: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = _bench_files(tmp_path, seeded)
    questions = files[questions_case] if questions_case else seeded[1]
    db_dir = files[db_case] if db_case else seeded[2]
    before = (store_digest(store_copy), table_counts(store_copy))
    res = rollscope_here(
        monkeypatch, capsys,
        "run", "--questions", questions, "--db-dir", db_dir, "--store", store_copy, "--quiet",
    )  # fmt: skip
    _assert_one_line_failure(res, expected, store_copy, before)


FLAG_CASES = [
    (["--samples", "-3"], "--samples"),
    (["--batch-size", "-1"], "--batch-size"),
    (["--step-budget", "-5"], "--step-budget"),
    (["--limit", "-1"], "limit"),
    (["--limit", "0"], "limit"),
    (["--dataset", "no-such-dataset"], "no-such-dataset"),
    (["--dataset", "demo:nosplit"], "nosplit"),
    (["--policy", "hf:"], "checkpoint"),
    (["--question-id", "q-count", "--question-id", "q-count"], "more than once"),
    (["--resume", "no-such-run"], "no-such-run"),
    (["--run-id", "77"], "77"),
    (["--resume", "done-run"], "already completed"),
    (["--run-id", "1"], "not queued"),
    (["--name", "done-run"], "already exists"),
    (["--samples", "many"], "--samples"),
    (["--no-such-flag", "1"], "--no-such-flag"),
    # The system's error, with the name it refused cut to a line's length.
    (["--dataset", "d" * 3000], f"error: File name too long: {'d' * 197}..."),
]


@pytest.mark.parametrize(("args", "expected"), FLAG_CASES)
def test_bad_flag_values(
    args: list[str],
    expected: str,
    seeded: tuple[Path, Path, Path],
    store_copy: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, questions, db_dir = seeded
    base = ["--questions", str(questions), "--db-dir", str(db_dir)]
    if any(a in args for a in ("--dataset", "--resume", "--run-id")):
        base = []
    before = (store_digest(store_copy), table_counts(store_copy))
    res = rollscope_here(monkeypatch, capsys, "run", *base, *args, "--store", store_copy, "--quiet")
    _assert_one_line_failure(res, expected, store_copy, before)


def test_checkpoint_without_weights(tmp_path: Path, store_copy: Path) -> None:
    ckpt = tmp_path / "checkpoint-2000"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "llama"}')
    before = (store_digest(store_copy), table_counts(store_copy))
    res = rollscope("run", "--policy", f"hf:{ckpt}", "--dataset", "demo", "--store", store_copy)
    _assert_one_line_failure(res, "no weights", store_copy, before)


def test_store_that_is_not_a_database_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "notes.db"
    target.write_text("my precious notes\n")
    res = rollscope("run", "--dataset", "demo", "--store", target, "--quiet")
    _assert_one_line_failure(res, "not a database")
    assert target.read_text() == "my precious notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("{tmp}/missing-dir/s.db", "does not exist"),
        ("{tmp}", "directory"),
        ("sqlite:///:memory:", "in-memory"),
        ("mysql://user@127.0.0.1/db", "no driver"),
        ("postgresql://nobody@127.0.0.1:1/none", "connection"),
        ("not a url://", "store"),
        # A byte that is not UTF-8 raised UnicodeEncodeError in the driver; a name past the
        # file system's length, OSError.
        ("{tmp}/s\udcff.db", "it holds bytes that are not UTF-8 text; name the store in UTF-8"),
        ("{tmp}/" + "s" * 300 + ".db", "that path cannot be used (File name too long)"),
        ("sqlite:///{tmp}/" + "s" * 300 + "/s.db", "that path cannot be used (File name too long)"),
    ],
)
def test_unusable_store_urls(store: str, expected: str, tmp_path: Path) -> None:
    res = rollscope(
        "run", "--dataset", "demo", "--store", store.format(tmp=tmp_path), "--quiet", timeout=60
    )
    _assert_one_line_failure(res, expected)
    assert list(tmp_path.iterdir()) == []


def test_store_from_a_newer_rollscope_is_refused_untouched(store_copy: Path) -> None:
    conn = sqlite3.connect(store_copy)
    conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.commit()
    conn.close()
    before = (store_digest(store_copy), table_counts(store_copy))
    for args in (["run", "--dataset", "demo"], ["runs"], ["export", "--run", "done-run"]):
        res = rollscope(*args, "--store", store_copy)
        _assert_one_line_failure(res, "newer than this rollscope", store_copy, before)


# -- odd text from a model reaches the store -------------------------------------------------

ODD = "QUERY SELECT 1\x00 -- \x1b[2J\u202e reversed 🎵 \x07"


def _odd_batch() -> tuple[RunSpec, list[IterationBatch]]:
    spec = RunSpec(
        name="odd-text", policy="random", dataset="demo", questions_path="q.json", db_dir="db"
    )
    start = EpisodeStart("q1", 0, 1, "concerts", f"question {ODD}", "SELECT 1")
    step = StepRecord(
        "q1", 0, 1, ({"role": "user", "content": ODD},), ODD, "QUERY", ODD,
        False, ODD, ODD, -0.01, True,
    )  # fmt: skip
    end = EpisodeRecord("q1", 0, "budget_exhausted", -0.01, 0.0, 0.0, 1, ODD, 0.1, error=ODD)
    return spec, [IterationBatch(started=[start], steps=[step], finished=[end])]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new store: a SQLite file, or a database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 's.db'}"
    return str(request.getfixturevalue("pg_store_url"))


def test_model_text_with_control_characters_is_stored(new_store_url: str) -> None:
    store = Store(new_store_url)
    try:
        spec, batches = _odd_batch()
        run_id = write_run(store, spec, batches, status=None)
        listed = store.list_episodes(EpisodeFilter(run_ids=(run_id,)))
        detail = store.get_episode(listed.items[0].id)
        assert detail is not None
        shown = detail.steps[0].raw_output
        # Everything but the NUL survives exactly; a NUL may come back as U+FFFD.
        assert shown == ODD or shown == ODD.replace("\x00", "\ufffd")
        assert detail.steps[0].argument == shown and detail.summary.question.endswith(ODD[-5:])
        # The prompt keeps its NUL: JSON escapes it, so it needs no stand-in.
        assert list(detail.steps[0].prompt) == [{"role": "user", "content": ODD}]
    finally:
        store.close()


def test_lone_surrogates_in_a_producers_text_are_stored_as_the_replacement_character(
    new_store_url: str,
) -> None:
    # A Recorder's strings or an env-server client's JSON escapes can hold them; no UTF-8 can,
    # and the write holding one failed on both backends, losing its whole batch.
    odd, shown = "ANSWER \ud800 and \udfff", "ANSWER \ufffd and \ufffd"
    spec = RunSpec(name="lone", policy="random", dataset="demo", questions_path="q", db_dir="d")
    start = EpisodeStart("q1", 0, 1, "concerts", f"question {odd}", f"SELECT '{odd}'")
    step = StepRecord(
        "q1", 0, 1, ({"role": "user", "content": odd},), odd, "ANSWER", odd,
        True, odd, odd, 0.0, True,
    )  # fmt: skip
    end = EpisodeRecord("q1", 0, "wrong", 0.0, 0.0, 0.0, 1, odd, 0.1, error=odd)
    store = Store(new_store_url)
    try:
        run_id = write_run(
            store, spec, [IterationBatch(started=[start], steps=[step], finished=[end])]
        )
        listed = store.list_episodes(EpisodeFilter(run_ids=(run_id,)))
        detail = store.get_episode(listed.items[0].id)
        assert detail is not None
        s = detail.steps[0]
        assert (s.raw_output, s.argument, s.observation, s.error) == (shown,) * 4
        assert (detail.summary.question, detail.gold_sql) == (
            f"question {shown}",
            f"SELECT '{shown}'",
        )
        assert (detail.summary.answer, detail.error) == (shown, shown)
        assert list(s.prompt) == [{"role": "user", "content": shown}]
    finally:
        store.close()
