"""The environment's rules: observations, rewards, budget, answers, observation caps."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_core import rewards
from rollout_core.actions import SQLAction
from rollout_core.datasets import load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.gold import GoldQueryError
from rollout_core.prompts import format_observation, get_system_prompt
from rollout_core.sandbox import Sandbox, SandboxLimits
from rollout_core.settings import EnvironmentSettings, SettingsError
from tests.support.benchmark import make_benchmark


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[SQLEnvironment]:
    questions, db_dir = make_benchmark(tmp_path)
    with SQLEnvironment(questions, db_dir, step_budget=4) as environment:
        yield environment


def test_reset_shows_question_and_tables(env: SQLEnvironment) -> None:
    obs = env.reset(question_id="q-count")
    assert obs.step == 0 and not obs.done and obs.error is None
    text = format_observation(obs)
    assert "How many singers are there?" in text
    assert "concert" in text and "singer" in text
    assert env.state.question.id == "q-count"
    assert len(env.state.episode_id) >= 8


def test_reset_by_seed_is_reproducible(env: SQLEnvironment) -> None:
    first = env.reset(seed=7).question
    assert all(env.reset(seed=7).question == first for _ in range(3))


def test_unknown_question_id(env: SQLEnvironment) -> None:
    with pytest.raises(KeyError, match="nope"):
        env.reset(question_id="nope")


def test_describe_shows_columns_keys_and_row_count(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("DESCRIBE", "concert"))
    assert obs.error is None and obs.reward == 0.0
    for part in ("singer_id", "venue", "REAL", "6"):
        assert part in obs.result
    assert "singer" in obs.result  # the foreign key names its target


def test_unknown_table_names_the_tables_and_costs_a_penalty(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("SAMPLE", "singers"))
    assert obs.error is not None
    assert "singer" in obs.error and "concert" in obs.error
    assert obs.reward == pytest.approx(rewards.ERROR_PENALTY)
    assert format_observation(obs).startswith("Error: ")


def test_sample_shows_first_rows(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("SAMPLE", "singer"))
    assert "Ada" in obs.result and "Ed" in obs.result


def test_query_progress_reward_pays_only_improvements(env: SQLEnvironment) -> None:
    env.reset(question_id="q-france")
    partial = env.step(SQLAction("QUERY", "SELECT name FROM singer WHERE name = 'Ada'"))
    assert 0 < partial.reward < rewards.PROGRESS_SCALE
    full = env.step(SQLAction("QUERY", "SELECT name FROM singer WHERE country = 'France'"))
    assert full.reward == pytest.approx(rewards.PROGRESS_SCALE - partial.reward)
    again = env.step(SQLAction("QUERY", "SELECT name FROM singer WHERE country='France'"))
    assert again.reward == 0.0
    assert env.state.cumulative_progress == pytest.approx(rewards.PROGRESS_SCALE)


def test_sql_error_is_an_observation_with_penalty(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("QUERY", "SELECT nope FROM singer"))
    assert obs.error is not None and "nope" in obs.error
    assert obs.reward == pytest.approx(rewards.ERROR_PENALTY)
    refused = env.step(SQLAction("QUERY", "DELETE FROM singer"))
    assert refused.error is not None and not refused.done


def test_correct_answer_ends_with_reward_one(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("ANSWER", "5"))
    assert obs.done and obs.reward == rewards.ANSWER_CORRECT
    assert obs.result == "Answer submitted: correct."
    assert env.state.outcome == "correct" and env.state.answer == "5"
    with pytest.raises(RuntimeError, match="over"):
        env.step(SQLAction("ANSWER", "5"))


def test_wrong_answer(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("ANSWER", "4"))
    assert obs.done and obs.reward == rewards.ANSWER_WRONG
    assert obs.result == "Answer submitted: incorrect."
    assert env.state.outcome == "wrong"


def test_budget_ends_the_episode(env: SQLEnvironment) -> None:
    env.reset(question_id="q-count")
    for i in range(4):
        obs = env.step(SQLAction("DESCRIBE", "singer"))
        assert obs.done == (i == 3)
        assert obs.steps_left == 3 - i
    assert env.state.outcome == "budget_exhausted"
    # one success, three repeats: the original's operational signal
    assert env.state.operational == 4 - 3


def test_observation_capped_by_tokenizer(tmp_path: Path) -> None:
    class CharTokenizer:
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [ord(c) for c in text]

        def decode(self, ids: list[int]) -> str:
            return "".join(chr(i) for i in ids)

    questions, db_dir = make_benchmark(tmp_path)
    settings = EnvironmentSettings(max_observation_tokens=40)
    env = SQLEnvironment(questions, db_dir, CharTokenizer(), 3, settings=settings)
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("QUERY", "SELECT * FROM concert"))
    assert obs.result.endswith("(cut at 40 tokens)")
    assert len(obs.result) < 80


def test_budget_must_be_positive(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    with pytest.raises(SettingsError, match="step_budget must be at least 1, got 0"):
        SQLEnvironment(questions, db_dir, step_budget=0)


def test_step_budget_argument_overrides_the_settings(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    settings = EnvironmentSettings(step_budget=7, sample_rows=2)
    with SQLEnvironment(questions, db_dir, None, 3, settings=settings) as env:
        assert env.step_budget == 3 and env.settings.sample_rows == 2
        assert env.reset(question_id="q-count").steps_left == 3
    with SQLEnvironment(questions, db_dir, settings=settings) as env:
        assert env.reset(question_id="q-count").steps_left == 7


def test_system_prompt_names_every_action_and_the_budget() -> None:
    prompt = get_system_prompt(7)
    for word in ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER", "7 actions"):
        assert word in prompt


def test_overlap_is_f1_of_rows() -> None:
    gold = [("a",), ("b",)]
    assert rewards.overlap([("a",), ("b",)], gold) == 1.0
    assert rewards.overlap([("A ",), ("b",)], gold) == 1.0
    assert rewards.overlap([("a",)], gold) == pytest.approx(2 / 3)
    assert rewards.overlap([], gold) == 0.0
    assert rewards.overlap([], []) == 1.0
    assert rewards.overlap([(6,)], [(6.0,)]) == 1.0


# -- the sandbox limits reach every read --------------------------------------------------

_SLOW_CTE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
TINY = SandboxLimits(
    max_cell_chars=5,
    max_rows=1,
    fetch_rows=3,
    deadline_seconds=0.5,
    max_value_bytes=2_000,
    gold_deadline_seconds=0.5,
    gold_fetch_rows=50,
)


@pytest.fixture()
def limits_bench(tmp_path: Path) -> tuple[Path, Path]:
    """The fixture benchmark plus a long value, a slow view and questions whose gold is large."""
    questions, db_dir = make_benchmark(tmp_path)
    conn = sqlite3.connect(db_dir / "concerts" / "concerts.sqlite")
    conn.executescript(
        """
        CREATE TABLE note (body TEXT);
        INSERT INTO note VALUES (printf('%.*c', 3000, 'x'));
        CREATE TABLE numbers (n INTEGER);
        WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 100)
            INSERT INTO numbers SELECT x FROM r;
        CREATE VIEW slow AS WITH RECURSIVE r(x) AS
            (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 100000000) SELECT x FROM r;
        """
    )
    conn.commit()
    conn.close()
    items = json.loads(questions.read_text())
    for qid, sql in [
        ("q-long-gold", "SELECT body FROM note"),
        ("q-slow-gold", _SLOW_CTE),
        ("q-many-gold", "SELECT n FROM numbers"),
    ]:
        items.append({"id": qid, "db_id": "concerts", "question": qid, "query": sql})
    questions.write_text(json.dumps(items))
    return questions, db_dir


@pytest.fixture()
def tiny_env(limits_bench: tuple[Path, Path]) -> Iterator[SQLEnvironment]:
    settings = EnvironmentSettings(step_budget=20, sample_rows=3, sandbox=TINY)
    with SQLEnvironment(*limits_bench, settings=settings) as environment:
        environment.reset(question_id="q-count")
        yield environment


def test_small_limits_bite_on_query(tiny_env: SQLEnvironment) -> None:
    obs = tiny_env.step(SQLAction("QUERY", "SELECT n, 'abcdefgh' FROM numbers"))
    # fetch_rows=3 fetched, max_rows=1 shown, cells cut at max_cell_chars=5.
    assert obs.result.splitlines() == ["n | 'abcd...", "1 | abcde...", "... more than 2 more rows"]
    slow = tiny_env.step(SQLAction("QUERY", _SLOW_CTE))
    assert slow.error == "query exceeded the 0.5 s deadline"
    long = tiny_env.step(SQLAction("QUERY", "SELECT hex(zeroblob(1500))"))
    assert long.error is not None and "exceeds 2,000 bytes" in long.error


def test_small_limits_bite_on_sample(tiny_env: SQLEnvironment) -> None:
    obs = tiny_env.step(SQLAction("SAMPLE", "singer"))
    # sample_rows=3 fetched, max_rows=1 shown, cells cut at max_cell_chars=5.
    assert obs.result.splitlines() == [
        "singe... | name | count... | age",
        "1 | Ada | Franc... | 31",
        "... 2 more rows",
    ]
    long = tiny_env.step(SQLAction("SAMPLE", "note"))
    assert long.error is not None and "exceeds 2,000 bytes" in long.error


def test_small_limits_bite_on_describe(tiny_env: SQLEnvironment) -> None:
    """The row count gets the sandbox's deadline: a slow view reads `row count unknown`."""
    assert "table numbers (100 rows)" in tiny_env.step(SQLAction("DESCRIBE", "numbers")).result
    obs = tiny_env.step(SQLAction("DESCRIBE", "slow"))
    assert obs.error is None and obs.result.startswith("table slow (row count unknown)")


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("q-long-gold", "exceeds 2,000 bytes"),
        ("q-slow-gold", "0.5 s deadline"),
        ("q-many-gold", "more than 50 rows"),
    ],
)
def test_small_limits_bite_on_the_gold_query(
    tiny_env: SQLEnvironment, question: str, message: str
) -> None:
    with pytest.raises(GoldQueryError, match=f"{question}.*{message}"):
        tiny_env.reset(question_id=question)


def test_default_limits_let_the_same_reads_through(limits_bench: tuple[Path, Path]) -> None:
    with SQLEnvironment(*limits_bench, step_budget=5) as env:
        for question in ("q-long-gold", "q-many-gold"):
            env.reset(question_id=question)
        assert "xxxxx" in env.step(SQLAction("SAMPLE", "note")).result
        described = env.step(SQLAction("DESCRIBE", "numbers")).result
        assert described.startswith("table numbers (100 rows)")


def test_a_shared_sandbox_is_used_and_left_open(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    dataset = load_dataset(questions, db_dir)
    with Sandbox(SandboxLimits(max_cell_chars=2)) as shared:
        first = SQLEnvironment(dataset=dataset, sandbox=shared)
        second = SQLEnvironment(dataset=dataset, sandbox=shared)
        for env in (first, second):
            env.reset(question_id="q-france")
            assert env.limits is shared.limits and env.settings.sandbox is shared.limits
            assert env.step(SQLAction("QUERY", "SELECT 'France'")).result.endswith("Fr...")
            env.close()
        # Still open for the other users: the environments did not own it.
        assert shared.run_select(db_dir / "concerts" / "concerts.sqlite", "SELECT 1").rows == [(1,)]


def test_a_sandbox_with_other_limits_than_the_settings_is_refused(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    settings = EnvironmentSettings(sandbox=SandboxLimits(max_rows=3))
    with Sandbox(SandboxLimits(max_rows=4)) as other, pytest.raises(ValueError, match="differ"):
        SQLEnvironment(questions, db_dir, settings=settings, sandbox=other)
    with Sandbox(SandboxLimits(max_rows=3)) as same:
        env = SQLEnvironment(questions, db_dir, settings=settings, sandbox=same)
        assert env.settings.sandbox == env.limits


def test_close_closes_the_environments_own_sandbox(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    env = SQLEnvironment(questions, db_dir)
    env.reset(question_id="q-count")
    env.close()
    with pytest.raises(RuntimeError, match="sandbox is closed"):
        env.reset(question_id="q-count")
