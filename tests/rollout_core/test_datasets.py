"""Loading Spider/BIRD question files and their databases, and the errors for bad input."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rollout_core.datasets import (
    Dataset,
    DatasetError,
    load_dataset,
    load_named_dataset,
    select_questions,
)


def make_db(path: Path) -> Path:
    """A real one-table SQLite file at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t (x INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2);")
    conn.close()
    return path


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path


def spider_item(db_id: str, question: str, query: str) -> dict[str, Any]:
    """A Spider dev item, parse fields included, as in the original dev.json."""
    return {
        "db_id": db_id,
        "question": question,
        "query": query,
        "query_toks": query.split(),
        "question_toks": question.split(),
        "sql": {"select": [False, []], "from": {"table_units": []}},
    }


@pytest.fixture()
def spider_layout(tmp_path: Path) -> Path:
    """`dev.json` plus `database/<db_id>/<db_id>.sqlite` for two databases."""
    root = tmp_path / "spider"
    for db_id in ("shop", "zoo"):
        make_db(root / "database" / db_id / f"{db_id}.sqlite")
    return write_json(
        root / "dev.json",
        [
            spider_item("shop", "How many rows?", "SELECT count(*) FROM t"),
            spider_item("zoo", "List x.", "SELECT x FROM t"),
            spider_item("shop", "Largest x?", "SELECT max(x) FROM t"),
        ],
    )


@pytest.fixture()
def bird_layout(tmp_path: Path) -> Path:
    """BIRD's `dev.json` (question_id, evidence, SQL, difficulty) and `dev_databases/`."""
    root = tmp_path / "bird"
    make_db(root / "dev_databases" / "cards" / "cards.sqlite")
    return write_json(
        root / "dev.json",
        [
            {
                "question_id": 0,
                "db_id": "cards",
                "question": "How many cards are there?",
                "evidence": "cards refers to table t",
                "SQL": "SELECT COUNT(*) FROM t",
                "difficulty": "simple",
            },
            {
                "question_id": 7,
                "db_id": "cards",
                "question": "Which x is odd?",
                "evidence": "",
                "SQL": "SELECT x FROM t WHERE x % 2 = 1",
                "difficulty": "moderate",
            },
        ],
    )


def test_spider_layout(spider_layout: Path) -> None:
    dataset = load_dataset(spider_layout)
    assert dataset.name == str(spider_layout.resolve())
    assert dataset.questions_path == spider_layout.resolve()
    assert dataset.db_dir == spider_layout.parent.resolve() / "database"
    assert [q.id for q in dataset.questions] == ["dev-0000", "dev-0001", "dev-0002"]
    first = dataset.questions[0]
    assert (first.db_id, first.question, first.gold_sql) == (
        "shop",
        "How many rows?",
        "SELECT count(*) FROM t",
    )
    assert first.evidence is None and first.difficulty is None
    assert dataset.db_ids == ("shop", "zoo")
    assert dataset.db_path("zoo") == dataset.db_dir / "zoo" / "zoo.sqlite"
    assert dataset.by_id("dev-0001").db_id == "zoo"
    assert "dev-0002" in dataset and "dev-0003" not in dataset
    assert len(dataset) == 3
    # Parse trees and token lists are not kept; only scalar extras are.
    assert dataset.extra_fields["dev-0000"] == {}
    assert dataset.splits == ()


def test_bird_layout(bird_layout: Path) -> None:
    dataset = load_dataset(bird_layout)
    assert dataset.db_dir == bird_layout.parent.resolve() / "dev_databases"
    assert [q.id for q in dataset.questions] == ["0", "7"]
    first, second = dataset.questions
    assert first.gold_sql == "SELECT COUNT(*) FROM t"
    assert first.evidence == "cards refers to table t"
    assert first.difficulty == "simple"
    assert second.evidence is None
    assert second.difficulty == "moderate"


def test_a_folder_names_its_questions_file(spider_layout: Path, tmp_path: Path) -> None:
    dataset = load_named_dataset(str(spider_layout.parent))
    assert dataset.questions_path.name == "dev.json"
    assert dataset.name == str(spider_layout.parent)
    # questions.json wins over dev.json when both are there.
    write_json(spider_layout.parent / "questions.json", [spider_item("zoo", "Q?", "SELECT 1")])
    assert len(load_named_dataset(str(spider_layout.parent))) == 1


def test_databases_in_the_questions_folder_itself(tmp_path: Path) -> None:
    make_db(tmp_path / "flat" / "shop" / "shop.sqlite")
    questions = write_json(tmp_path / "flat" / "qs.json", [spider_item("shop", "Q?", "SELECT 1")])
    assert load_dataset(questions).db_dir == (tmp_path / "flat").resolve()


def test_db_dir_given_explicitly(tmp_path: Path) -> None:
    make_db(tmp_path / "elsewhere" / "shop" / "shop.sqlite")
    questions = write_json(tmp_path / "qs" / "q.json", [spider_item("shop", "Q?", "SELECT 1")])
    dataset = load_named_dataset(str(questions), db_dir=tmp_path / "elsewhere")
    assert dataset.db_dir == (tmp_path / "elsewhere").resolve()
    assert dataset.db_path("shop").is_file()


def test_ids_from_id_or_question_id_and_extras_kept(tmp_path: Path) -> None:
    make_db(tmp_path / "database" / "shop" / "shop.sqlite")
    items = [
        {"id": "a-1", "db_id": "shop", "question": "Q1", "query": "SELECT 1", "split": "train"},
        {
            "question_id": 12,
            "db_id": "shop",
            "question": "Q2",
            "query": "SELECT 2",
            "split": "test",
        },
        {"db_id": "shop", "question": "Q3", "query": "SELECT 3", "split": "test", "level": 2},
    ]
    dataset = load_dataset(write_json(tmp_path / "mixed.json", items))
    assert [q.id for q in dataset.questions] == ["a-1", "12", "mixed-0002"]
    assert dataset.splits == ("test", "train")
    assert dataset.extra_fields["mixed-0002"] == {"split": "test", "level": 2}


def test_split_filters_questions(tmp_path: Path) -> None:
    make_db(tmp_path / "database" / "shop" / "shop.sqlite")
    items = [
        {"db_id": "shop", "question": f"Q{i}", "query": "SELECT 1", "split": split}
        for i, split in enumerate(["train", "test", "train", "train"])
    ]
    questions = write_json(tmp_path / "q.json", items)
    test = load_dataset(questions, split="test")
    assert [q.id for q in test.questions] == ["q-0001"]
    assert test.split == "test" and test.splits == ("test", "train")
    assert len(load_dataset(questions, split="train")) == 3
    with pytest.raises(DatasetError, match=r"unknown split 'dev' .*splits present: test, train"):
        load_dataset(questions, split="dev")


def test_split_on_a_file_without_splits(spider_layout: Path) -> None:
    with pytest.raises(DatasetError, match=r"split 'test' was asked for but .* no 'split' fields"):
        load_dataset(spider_layout, split="test")


def test_check_databases_false_skips_the_database_check(tmp_path: Path) -> None:
    questions = write_json(tmp_path / "q.json", [spider_item("gone", "Q?", "SELECT 1")])
    dataset = load_dataset(questions, check_databases=False)
    assert dataset.db_dir == tmp_path.resolve() / "database"
    assert dataset.questions[0].db_id == "gone"


# --- errors: each names the problem and the fix ---


def test_missing_questions_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as error:
        load_dataset(tmp_path / "x.json")
    assert str(error.value) == (
        f"questions file not found: {tmp_path / 'x.json'}"
        " (pass --questions PATH to a Spider/BIRD-style JSON list)"
    )


def test_folder_without_questions_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"no questions.json or dev.json in .* --questions"):
        load_dataset(tmp_path)


def test_unknown_named_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"dataset not found: 'nope' \(pass 'demo', a questions"):
        load_named_dataset("nope")


def test_invalid_json_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"db_id": "a",\n    "question": }\n]\n')
    with pytest.raises(DatasetError, match=r"not valid JSON \(line 3 column 17\).*bad\.json"):
        load_dataset(path)


@pytest.mark.parametrize("escape", ["", "\\ud800"], ids=["plain", "a lone surrogate"])
def test_json_nested_past_pythons_stack_is_refused_in_one_line(tmp_path: Path, escape: str) -> None:
    path = tmp_path / "deep.json"
    # A RecursionError: reading 5,000 levels, or making 900 whole again after a lone surrogate.
    levels = 900 if escape else 5_000
    path.write_text("[" * levels + f'"{escape}"' + "]" * levels)
    with pytest.raises(DatasetError, match=r"^questions file nests lists or objects too deep"):
        load_dataset(path)


def test_a_number_past_pythons_digits_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    # json's int() refuses it with a ValueError that named sys.set_int_max_str_digits().
    path.write_text(
        '[{"db_id": "d", "question": "Q?", "query": "SELECT 1", "id": 1%s}]' % ("0" * 5000)
    )
    with pytest.raises(
        DatasetError, match=r"^questions file holds a whole number of more than 4,300"
    ):
        load_dataset(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'[{"question": "caf\xe9"}]')
    with pytest.raises(DatasetError, match="not UTF-8 text"):
        load_dataset(path)


def test_a_lone_surrogates_escape_reads_as_the_replacement_character(tmp_path: Path) -> None:
    # No UTF-8 holds one: a tokenizer given the question failed the whole run (TypeError).
    make_db(tmp_path / "database" / "shop" / "shop.sqlite")
    items = [{"db_id": "shop", "question": "How many \ud800?", "query": "SELECT '\udfff'"}]
    (question,) = load_dataset(write_json(tmp_path / "q.json", items)).questions
    assert (question.question, question.gold_sql) == ("How many \ufffd?", "SELECT '\ufffd'")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"questions": []}, "must hold a JSON list of question objects, not a dict"),
        ([], "holds no questions"),
        ([{"db_id": "s", "question": "Q", "query": "SELECT 1"}, "text"], r"#1 \(0-based\).* str"),
        (
            [{"db_id": "s", "question": "Q", "query": "SELECT 1"}, {"db_id": "s", "query": "S"}],
            r"question 'q-0001' \(#1\) in q.json has no 'question' field",
        ),
        ([{"db_id": "s", "question": "Q"}], r"has no 'query' \(or BIRD's 'SQL'\) field"),
        ([{"question": "Q", "query": "SELECT 1"}], "has no 'db_id' field"),
        ([{"db_id": "s", "question": "  ", "query": "S"}], "empty or non-text 'question'"),
        ([{"db_id": 3, "question": "Q", "query": "S"}], "empty or non-text 'db_id'"),
        ([{"db_id": "s", "question": "Q", "query": "S", "evidence": 5}], "non-text 'evidence'"),
        ([{"id": [1], "db_id": "s", "question": "Q", "query": "S"}], "'id' that is neither"),
        ([{"db_id": "../etc", "question": "Q", "query": "S"}], "not a plain folder name"),
        (
            [
                {"id": "x", "db_id": "s", "question": "Q", "query": "S"},
                {"id": "y", "db_id": "s", "question": "Q", "query": "S"},
                {"question_id": "x", "db_id": "s", "question": "Q", "query": "S"},
            ],
            r"duplicate question id 'x' at #0 and #2 in q.json \(ids must be unique",
        ),
    ],
)
def test_bad_items(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        load_dataset(write_json(tmp_path / "q.json", data), check_databases=False)


def test_missing_database_names_question_and_path(spider_layout: Path) -> None:
    zoo = spider_layout.parent.resolve() / "database" / "zoo" / "zoo.sqlite"
    zoo.unlink()
    with pytest.raises(DatasetError) as error:
        load_dataset(spider_layout)
    assert str(error.value) == (
        f"question 'dev-0001' uses db_id 'zoo' but {zoo} does not exist"
        " (pass --db-dir to the folder holding <db_id>/<db_id>.sqlite)"
    )


def test_corrupt_database_is_named(spider_layout: Path) -> None:
    shop = spider_layout.parent.resolve() / "database" / "shop" / "shop.sqlite"
    shop.write_bytes(b"this is not a database at all")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(shop))} is not a SQLite database"):
        load_dataset(spider_layout)


def test_empty_database_file_is_not_a_database(spider_layout: Path) -> None:
    shop = spider_layout.parent.resolve() / "database" / "shop" / "shop.sqlite"
    shop.write_bytes(b"")
    with pytest.raises(DatasetError, match="is not a SQLite database"):
        load_dataset(spider_layout)


def test_given_db_dir_that_does_not_exist(spider_layout: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"database folder not found: .*nowhere \(pass --db-dir"):
        load_dataset(spider_layout, tmp_path / "nowhere")


def test_no_database_folder_beside_the_questions(tmp_path: Path) -> None:
    questions = write_json(tmp_path / "q.json", [spider_item("shop", "Q?", "SELECT 1")])
    with pytest.raises(DatasetError, match=r"no databases found beside .*--db-dir"):
        load_dataset(questions)


# --- selecting questions ---


@pytest.fixture()
def five(tmp_path: Path) -> Dataset:
    make_db(tmp_path / "database" / "shop" / "shop.sqlite")
    items = [{"db_id": "shop", "question": f"Q{i}", "query": "SELECT 1"} for i in range(5)]
    return load_dataset(write_json(tmp_path / "five.json", items))


def test_select_all_limit_and_ids(five: Dataset) -> None:
    assert select_questions(five) == list(five.questions)
    assert [q.id for q in select_questions(five, limit=2)] == ["five-0000", "five-0001"]
    assert len(select_questions(five, limit=50)) == 5
    picked = select_questions(five, question_ids=["five-0003", "five-0001"], limit=1)
    assert [q.id for q in picked] == ["five-0003", "five-0001"]


@pytest.mark.parametrize("limit", [0, -3])
def test_select_rejects_non_positive_limit(five: Dataset, limit: int) -> None:
    with pytest.raises(DatasetError, match=rf"limit must be a positive .* got {limit} \(omit it"):
        select_questions(five, limit=limit)


def test_select_rejects_unknown_and_repeated_ids(five: Dataset) -> None:
    with pytest.raises(
        DatasetError,
        match=r"unknown question ids in dataset '.*five.json': 'nope', 'gone' .*'five-0000'",
    ):
        select_questions(five, question_ids=["nope", "five-0001", "gone"])
    with pytest.raises(DatasetError, match="'five-0001' is listed more than once"):
        select_questions(five, question_ids=["five-0001", "five-0001"])
    with pytest.raises(DatasetError, match="no question ids given"):
        select_questions(five, question_ids=[])
    with pytest.raises(DatasetError, match=r"unknown question id 'zz' .*ids look like"):
        five.by_id("zz")


# --- the bundled demo and the real Spider dev set ---


def test_named_demo_and_its_splits() -> None:
    demo = load_named_dataset("demo")
    train = load_named_dataset("demo:train")
    test = load_named_dataset("demo", split="test")
    assert (demo.name, train.name, test.name) == ("demo", "demo:train", "demo:test")
    assert len(demo) >= 80 and len(train) + len(test) == len(demo)
    assert demo.splits == ("test", "train")
    assert set(train.db_ids) == set(test.db_ids) == set(demo.db_ids)
    assert not {q.id for q in train.questions} & {q.id for q in test.questions}
    with pytest.raises(DatasetError, match="unknown split 'dev'"):
        load_named_dataset("demo:dev")


def test_real_spider_dev_set(spider: Path) -> None:
    dataset = load_named_dataset(str(spider))
    assert len(dataset) == 972
    assert len(dataset.db_ids) == 19
    assert dataset.db_dir == (spider / "database").resolve()
    assert dataset.questions[0].id == "spider-dev-0000"
    assert all(dataset.db_path(db_id).is_file() for db_id in dataset.db_ids)
    first = select_questions(dataset, limit=3)
    assert [q.id for q in first] == ["spider-dev-0000", "spider-dev-0001", "spider-dev-0002"]


def test_importing_datasets_does_not_import_torch() -> None:
    code = "import sys, rollout_core.datasets; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
