"""The environment's rules: observations, rewards, budget, answers, observation caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_core import rewards
from rollout_core.actions import SQLAction
from rollout_core.environment import SQLEnvironment
from rollout_core.prompts import format_observation, get_system_prompt
from tests.fixtures import make_benchmark


@pytest.fixture()
def env(tmp_path: Path) -> SQLEnvironment:
    questions, db_dir = make_benchmark(tmp_path)
    return SQLEnvironment(questions, db_dir, step_budget=4)


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
    env = SQLEnvironment(questions, db_dir, tokenizer=CharTokenizer(), step_budget=3)
    env.max_observation_tokens = 40
    env.reset(question_id="q-count")
    obs = env.step(SQLAction("QUERY", "SELECT * FROM concert"))
    assert obs.result.endswith("(cut at 40 tokens)")
    assert len(obs.result) < 80


def test_budget_must_be_positive(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    with pytest.raises(ValueError, match="step_budget"):
        SQLEnvironment(questions, db_dir, step_budget=0)


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
