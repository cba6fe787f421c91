"""The environment on odd tables and odd actions: DESCRIBE of a table SQLite cannot read the
columns of (an FTS5 or R*Tree virtual table, a view over a table that is gone) is the agent's
failed turn, as SAMPLE of it is, never an exception that ends the run; generated columns are
described as SAMPLE shows them; an action type none of the four is refused, not answered."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rollout_core.actions import SQLAction
from rollout_core.environment import SQLEnvironment


@pytest.fixture
def env(tmp_path: Path) -> SQLEnvironment:
    folder = tmp_path / "database" / "odd"
    folder.mkdir(parents=True)
    with closing(sqlite3.connect(folder / "odd.sqlite")) as conn:
        conn.executescript(
            """
            CREATE TABLE t(a INTEGER PRIMARY KEY, b INT GENERATED ALWAYS AS (a * 2) VIRTUAL);
            INSERT INTO t(a) VALUES (1), (2);
            CREATE VIRTUAL TABLE docs USING fts5(body);
            CREATE VIRTUAL TABLE boxes USING rtree(id, minx, maxx);
            CREATE VIEW gone AS SELECT * FROM missing_table;
            """
        )
    questions = tmp_path / "dev.json"
    gold = "SELECT count(*) FROM t"
    questions.write_text(json.dumps([{"db_id": "odd", "question": "How many?", "query": gold}]))
    environment = SQLEnvironment(str(questions))
    environment.reset(question_id="dev-0000")
    return environment


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ("docs", "cannot describe docs: "),
        ("boxes", "cannot describe boxes: not authorized"),
        ("gone", "cannot describe gone: no such table: main.missing_table"),
    ],
)
def test_an_unreadable_table_is_a_failed_turn(env: SQLEnvironment, table: str, why: str) -> None:
    result = env.step(SQLAction("DESCRIBE", table))
    assert result.error is not None and result.error.startswith(why)
    assert not result.done
    answered = env.step(SQLAction("ANSWER", "2"))
    assert answered.done and answered.reward > 0  # the episode goes on to its answer


def test_generated_columns_are_described(env: SQLEnvironment) -> None:
    described = env.step(SQLAction("DESCRIBE", "t")).result
    assert described.splitlines()[2:] == ["  a INTEGER (primary key)", "  b INT"]
    assert "a | b" in env.step(SQLAction("SAMPLE", "t")).result


def test_an_action_type_none_of_the_four_is_refused_not_answered(env: SQLEnvironment) -> None:
    # SQLAction is a loop's to build: DROP must not be graded as an ANSWER and end the episode.
    with pytest.raises(ValueError, match="unknown action type 'DROP': use one of DESCRIBE, "):
        env.step(SQLAction("DROP", "t"))  # type: ignore[arg-type]
    assert not env.state.done and env.state.step_count == 0
