"""The bundled demo benchmark: reproducible build, reuse, and a gold query set that holds up."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rollout_core.datasets import Dataset, load_dataset
from rollout_core.demo_benchmark import (
    DEMO_VERSION,
    DemoPaths,
    build_demo_benchmark,
    default_demo_dir,
    demo_db_ids,
)

KINDS = {
    "count",
    "filter",
    "string",
    "join",
    "group",
    "having",
    "order_limit",
    "multi_column",
    "average",
    "subquery",
    "empty",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    return build_demo_benchmark(tmp_path_factory.mktemp("demo") / "bench")


@pytest.fixture(scope="module")
def dataset(demo: DemoPaths) -> Dataset:
    return load_dataset(demo.questions_path, demo.db_dir, name="demo")


@pytest.fixture(scope="module")
def raw_items(demo: DemoPaths) -> list[dict[str, str]]:
    items: list[dict[str, str]] = json.loads(demo.questions_path.read_text())
    return items


def _run(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_layout_is_spider_style(demo: DemoPaths) -> None:
    assert demo.questions_path == demo.root / "questions.json"
    for db_id in demo_db_ids():
        assert demo.db_path(db_id) == demo.db_dir / db_id / f"{db_id}.sqlite"
        assert demo.db_path(db_id).is_file()
    assert sorted(p.name for p in demo.root.iterdir()) == [
        "database",
        "manifest.json",
        "questions.json",
    ]


def test_build_is_byte_for_byte_reproducible(tmp_path: Path) -> None:
    first = build_demo_benchmark(tmp_path / "a")
    second = build_demo_benchmark(tmp_path / "b")
    files = _files(first.root)
    assert len([name for name in files if name.endswith(".sqlite")]) == len(demo_db_ids())
    assert files == _files(second.root)


def test_second_call_reuses_the_build(tmp_path: Path) -> None:
    paths = build_demo_benchmark(tmp_path / "bench")
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths.root.rglob("*")}
    again = build_demo_benchmark(tmp_path / "bench")
    assert again == paths
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths.root.rglob("*")} == before
    # No staging folders are left beside the build.
    assert [p.name for p in tmp_path.iterdir()] == ["bench"]


def test_a_modified_database_is_rebuilt(tmp_path: Path) -> None:
    paths = build_demo_benchmark(tmp_path / "bench")
    db_path = paths.db_path("library")
    original = db_path.read_bytes()
    db_path.chmod(0o644)
    conn = sqlite3.connect(db_path)
    conn.execute("DELETE FROM loans")
    conn.commit()
    conn.close()
    assert db_path.read_bytes() != original
    build_demo_benchmark(tmp_path / "bench")
    assert db_path.read_bytes() == original


def test_an_incomplete_folder_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "bench"
    (target / "database" / "library").mkdir(parents=True)
    (target / "database" / "library" / "library.sqlite").write_bytes(b"half written")
    paths = build_demo_benchmark(target)
    assert _run(paths.db_path("library"), "SELECT COUNT(*) FROM books") == [(36,)]
    assert (target / "manifest.json").is_file()


def test_databases_are_closed_rollback_journal_and_read_only(demo: DemoPaths) -> None:
    for db_id in demo_db_ids():
        db_path = demo.db_path(db_id)
        header = db_path.read_bytes()[:20]
        assert header[:16] == b"SQLite format 3\x00"
        # Bytes 18-19 are the file format versions: 1 = rollback journal, 2 = WAL.
        assert header[18:20] == b"\x01\x01"
        assert db_path.stat().st_mode & 0o222 == 0
        assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]
        assert _run(db_path, "PRAGMA integrity_check") == [("ok",)]
        assert _run(db_path, "PRAGMA foreign_key_check") == []


def test_each_database_has_keys_and_tens_to_hundreds_of_rows(demo: DemoPaths) -> None:
    db_ids = demo_db_ids()
    assert len(db_ids) >= 4
    for db_id in db_ids:
        db_path = demo.db_path(db_id)
        tables = [
            row[0] for row in _run(db_path, "SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        assert 2 <= len(tables) <= 5, db_id
        foreign_keys = 0
        for table in tables:
            columns = _run(db_path, f"PRAGMA table_info({table})")
            assert any(col[5] for col in columns), f"{db_id}.{table} has no primary key"
            foreign_keys += len(_run(db_path, f"PRAGMA foreign_key_list({table})"))
        assert foreign_keys >= 1, db_id
        counts = [_run(db_path, f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables]
        assert all(isinstance(n, int) and n >= 4 for n in counts), (db_id, counts)
        total = sum(n for n in counts if isinstance(n, int))
        assert 50 <= total <= 1000, (db_id, total)


def test_default_target_follows_rollscope_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLSCOPE_HOME", str(tmp_path / "home"))
    assert default_demo_dir() == tmp_path / "home" / DEMO_VERSION
    assert build_demo_benchmark().root == (tmp_path / "home" / DEMO_VERSION).resolve()
    monkeypatch.delenv("ROLLSCOPE_HOME")
    assert default_demo_dir() == Path.home() / ".cache" / "rollscope" / DEMO_VERSION


def test_every_gold_query_executes(dataset: Dataset, raw_items: list[dict[str, str]]) -> None:
    kinds = {item["id"]: item["kind"] for item in raw_items}
    empty = 0
    for question in dataset.questions:
        rows = _run(dataset.db_path(question.db_id), question.gold_sql)
        kind = kinds[question.id]
        if kind == "empty":
            assert rows == [], question.id
            empty += 1
        else:
            assert rows, f"{question.id} returns no rows"
        if kind == "average":
            value = rows[0][0]
            assert isinstance(value, float) and not value.is_integer(), question.id
        if kind == "multi_column":
            assert len(rows[0]) >= 2 and len(rows) >= 2, question.id
    assert empty >= 5


def test_question_set_size_and_coverage(dataset: Dataset, raw_items: list[dict[str, str]]) -> None:
    assert len(dataset.questions) >= 80
    assert len(dataset.db_ids) >= 4
    assert set(dataset.db_ids) == set(demo_db_ids())
    assert {item["kind"] for item in raw_items} == KINDS
    assert len({q.question for q in dataset.questions}) == len(dataset.questions)
    per_db = Counter(q.db_id for q in dataset.questions)
    assert min(per_db.values()) >= 15


def test_splits_cover_every_database_and_kind(raw_items: list[dict[str, str]]) -> None:
    splits = Counter(item["split"] for item in raw_items)
    assert set(splits) == {"train", "test"}
    assert 0.25 <= splits["test"] / len(raw_items) <= 0.35
    for key in ("db_id", "kind"):
        for value in {item[key] for item in raw_items}:
            present = {item["split"] for item in raw_items if item[key] == value}
            assert present == {"train", "test"}, (key, value)


def test_questions_quote_the_values_their_sql_needs(dataset: Dataset) -> None:
    for question in dataset.questions:
        for literal in re.findall(r"'([^']*)'", question.gold_sql):
            assert f'"{literal}"' in question.question, (question.id, literal)
        without_limit = re.sub(r"LIMIT \d+", "", question.gold_sql)
        for number in re.findall(r"\b\d{2,}\b", without_limit):
            assert number in question.question, (question.id, number)


def test_order_by_limit_answers_do_not_depend_on_ties(dataset: Dataset) -> None:
    checked = 0
    for question in dataset.questions:
        match = re.search(r"ORDER BY (.+?) (ASC|DESC) LIMIT (\d+)$", question.gold_sql)
        if not match:
            continue
        checked += 1
        key, limit = match.group(1), int(match.group(3))
        head = question.gold_sql[: match.start()]
        keyed = re.sub(r"^SELECT ", f"SELECT {key}, ", head) + match.group(0)[: -len(str(limit))]
        rows = _run(dataset.db_path(question.db_id), f"{keyed}{limit + 1}")
        if len(rows) > limit:
            # The row just past the limit must sort strictly after the last one kept.
            assert rows[limit - 1][0] != rows[limit][0], question.id
    assert checked >= 10


def test_concurrent_builds_agree(tmp_path: Path) -> None:
    target = tmp_path / "bench"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(build_demo_benchmark, [target] * 4))
    assert all(result == results[0] for result in results)
    assert _files(target) == _files(build_demo_benchmark(tmp_path / "reference").root)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "reference"]
