"""A rollout's prompt is often a template: the schema, the rules, then the question. The
episode's question is what the template asks, so that tables list questions, not one schema
after another; its id still comes from the whole message, so two schemas asking the same words
stay two questions."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.importers.turns import asked_question
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import sql_response, verl_dump


def omnisql_prompt(schema: str, question: str) -> str:
    """A decoded prompt in OmniSQL's `input_prompt_template` (RUCKBReasoning/OmniSQL), the
    one SkyRL-SQL and Arctic-Text2SQL-R1 train with."""
    return (
        "system\nYou are a helpful assistant.\nuser\nTask Overview:\nYou are a data science "
        "expert. Below, you are provided with a database schema and a natural language "
        "question. Your task is to understand the schema and generate a valid SQL query to "
        "answer the question.\n\nDatabase Engine:\nSQLite\n\nDatabase Schema:\n"
        f"{schema}\nThis schema describes the database's structure, including tables, columns, "
        "primary keys, foreign keys, and any relevant relationships or constraints.\n\n"
        f"Question:\n{question}\n\nInstructions:\n- Make sure you only output the information "
        "that is asked in the question.\n\nOutput Format:\nIn your answer, please enclose the "
        "generated SQL query in a code block.\nassistant\n"
    )


@pytest.mark.parametrize(
    ("message", "asked"),
    [
        # rollscope's own first message
        ("Question: How many?\nDatabase: concert_singer\nTables: singer", "How many?"),
        # Markdown headings, a question of two lines
        ("# Schema:\nt(a)\n# Question:\nWhat is\nthe top?\n# Hints", "What is\nthe top?"),
        ("**Question:** How many?\n**Instructions:** none", "How many?"),
        # A few-shot template: its examples' questions come before the one asked
        ("Examples:\nQuestion: Q1?\nSQL: SELECT 1\n\nQuestion:\nThis one?\n\nRules:", "This one?"),
        ("Schema: t(a)\nQuestion 3: how many rows?", "how many rows?"),
        # No Question heading, or an empty one: the whole message
        ("How many singers are there?", "How many singers are there?"),
        ("Questions: a list of them", "Questions: a list of them"),
        ("Question:\n\n", "Question:\n\n"),
    ],
)  # fmt: skip
def test_the_question_a_template_asks(message: str, asked: str) -> None:
    assert asked_question(message) == asked


def test_an_imported_template_prompt_gives_its_question_and_keeps_its_prompt(
    store: Store, tmp_path: Path
) -> None:
    singers = "How many singers do we have?"
    prompts = [
        omnisql_prompt("CREATE TABLE singer (id INT);", singers),
        omnisql_prompt("CREATE TABLE singer (id INT, age INT);", singers),
        omnisql_prompt("CREATE TABLE stadium (id INT);", "How many stadiums are there?"),
    ]
    output = sql_response(
        [("<sql>SELECT count(*) FROM singer</sql>", "6"), ("<solution>6</solution>", None)]
    )
    verl_dump(tmp_path / "dump", 1, prompts, [output] * 3, [""] * 3, [1.0, 0.0, 1.0], {})
    run_import(store, tmp_path / "dump")
    stored = rows(store, "SELECT question, question_id FROM episodes ORDER BY id")
    assert [q for q, _ in stored] == [singers, singers, "How many stadiums are there?"]
    # Two schemas asking the same words are two questions (two GRPO groups).
    assert len({qid for _, qid in stored}) == 3
    # The model's prompt is kept whole: schema, rules and all.
    (prompt,) = rows(
        store, "SELECT prompt FROM step_prompts WHERE step_no = 1 ORDER BY episode_id LIMIT 1"
    )
    assert "CREATE TABLE singer (id INT);" in prompt[0] and "Instructions:" in prompt[0]


def _schema(db: Path) -> str:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        found = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql NOT NULL")
        return "\n".join(sql for (sql,) in found)


def test_spider_rollouts_in_a_template_take_spiders_ids_and_are_regraded(
    store: Store, tmp_path: Path, spider: Path
) -> None:
    # A SkyRL-SQL run on Spider dev as verl dumps it: OmniSQL's prompt with each database's
    # real schema, and a final <solution> that is the gold SQL (score 1) or a wrong one.
    questions = json.loads((spider / "questions.json").read_text())[:40]
    prompts, outputs, scores = [], [], []
    for i, q in enumerate(questions):
        db = spider / "database" / q["db_id"] / f"{q['db_id']}.sqlite"
        prompts.append(omnisql_prompt(_schema(db), q["question"]))
        right = i % 3 != 0
        final = q["query"] if right else "SELECT 'no such answer'"
        outputs.append(
            sql_response(
                [
                    ("<sql>SELECT count(*) FROM sqlite_master</sql>", "5"),
                    (f"<solution>{final}</solution>", None),
                ]
            )
        )
        scores.append(1.0 if right else 0.0)
    gold = [q["query"] for q in questions]
    verl_dump(tmp_path / "dump", 1, prompts, outputs, gold, scores, {})
    run_import(
        store,
        tmp_path / "dump",
        questions=str(spider / "questions.json"),
        db_dir=str(spider / "database"),
    )
    stored = rows(
        store,
        "SELECT e.question_id, e.question, e.reward, s.regraded FROM episodes e "
        "JOIN episode_sources s ON s.episode_id = e.id ORDER BY e.id",
    )
    assert [(qid, text) for qid, text, _, _ in stored] == [
        (q["id"], q["question"]) for q in questions
    ]
    # rollscope's grade of each final SQL against the gold agrees with the file's score.
    assert [regraded for *_, regraded in stored] == [
        "correct" if score else "wrong" for score in scores
    ]
