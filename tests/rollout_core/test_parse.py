"""parse_model_output: the action line rules, code fences, fallbacks, hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_core.actions import SQLAction
from rollout_core.parse import parse_model_output
from rollout_core.records import ACTION_KINDS


@pytest.mark.parametrize(
    ("text", "kind", "argument"),
    [
        ("QUERY: SELECT 1", "QUERY", "SELECT 1"),
        ("query SELECT 1", "QUERY", "SELECT 1"),
        ("   Query:SELECT 1", "QUERY", "SELECT 1"),
        ("\tANSWER : 5", "ANSWER", "5"),
        ("answer 5", "ANSWER", "5"),
        ("DESCRIBE singer", "DESCRIBE", "singer"),
        ("describe: `singer`;", "DESCRIBE", "singer"),
        ('SAMPLE "singer"', "SAMPLE", "singer"),
        ("Sample: [singer]", "SAMPLE", "singer"),
        ("DESCRIBE 'concert'.", "DESCRIBE", "concert"),
        ("**ANSWER:** 5", "ANSWER", "5"),
        ("**QUERY**: SELECT 1", "QUERY", "SELECT 1"),
        ("ANSWER: `Paris`", "ANSWER", "Paris"),
        ('ANSWER: ["a", "b"]', "ANSWER", '["a", "b"]'),
    ],
)
def test_action_line_forms(text: str, kind: str, argument: str) -> None:
    assert parse_model_output(text) == SQLAction(kind, argument)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Let me look first.\nDESCRIBE singer", SQLAction("DESCRIBE", "singer")),
        ("DESCRIBE a\nQUERY: SELECT 1", SQLAction("DESCRIBE", "a")),
        ("QUERY: SELECT 1\nANSWER: 5", SQLAction("QUERY", "SELECT 1")),
        ("I think so.\nANSWER: 5\nQUERY: SELECT 2", SQLAction("ANSWER", "5")),
    ],
)
def test_first_action_line_wins(text: str, expected: SQLAction) -> None:
    assert parse_model_output(text) == expected


@pytest.mark.parametrize(
    "text", ["DESCRIBEsinger", "ANSWERS: 5", "queryx SELECT 1", "QUERY_1: SELECT 1", "ANSWER-5"]
)
def test_action_word_must_stand_alone(text: str) -> None:
    assert parse_model_output(text) == SQLAction("QUERY", text, parsed=False)


def test_multi_line_query_is_kept_whole_up_to_a_blank_line() -> None:
    text = "QUERY: SELECT name\nFROM singer\n  WHERE age > 30\n\nThis should list them."
    assert parse_model_output(text) == SQLAction(
        "QUERY", "SELECT name\nFROM singer\n  WHERE age > 30"
    )


def test_query_word_alone_then_sql_on_following_lines() -> None:
    text = "QUERY:\nSELECT count(*)\nFROM singer"
    assert parse_model_output(text) == SQLAction("QUERY", "SELECT count(*)\nFROM singer")


def test_answer_values_one_per_line() -> None:
    assert parse_model_output("ANSWER:\nParis\nLondon\n\nDone.") == SQLAction(
        "ANSWER", "Paris\nLondon"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("QUERY:\n```sql\nSELECT 1\n```", SQLAction("QUERY", "SELECT 1")),
        ("QUERY:\n\n```sql\nSELECT a\n\nFROM t\n```\nmore", SQLAction("QUERY", "SELECT a\nFROM t")),
        ("QUERY: ```sql\nSELECT 1\nFROM t\n```", SQLAction("QUERY", "SELECT 1\nFROM t")),
        ("QUERY: ```SELECT 1```", SQLAction("QUERY", "SELECT 1")),
        ("```\nANSWER: 5\n```", SQLAction("ANSWER", "5")),
        ("```sql\nQUERY: SELECT 1\n```", SQLAction("QUERY", "SELECT 1")),
        ("```ANSWER: 5```", SQLAction("ANSWER", "5")),
        ("DESCRIBE:\n```\nsinger\n```", SQLAction("DESCRIBE", "singer")),
        ("SAMPLE ```singer```", SQLAction("SAMPLE", "singer")),
        # An action word inside a closed block is the argument, not a new action.
        ("ANSWER:\n```\nSample\n```", SQLAction("ANSWER", "Sample")),
        ("QUERY ```sql\nSELECT a\nANSWER 5\n```", SQLAction("QUERY", "SELECT a\nANSWER 5")),
        # An unclosed block still ends at the next action line.
        ("QUERY:\n```sql\nSELECT 1\nANSWER 5", SQLAction("QUERY", "SELECT 1")),
    ],
)
def test_code_fences_are_removed(text: str, expected: SQLAction) -> None:
    assert parse_model_output(text) == expected


def test_describe_takes_one_line_only() -> None:
    assert parse_model_output("DESCRIBE singer\nand then concert") == SQLAction(
        "DESCRIBE", "singer"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("QUERY:\n\nANSWER: 5", SQLAction("ANSWER", "5")),
        ("DESCRIBE:\nSAMPLE singer", SQLAction("SAMPLE", "singer")),
        ("ANSWER:   \nQUERY: SELECT 1", SQLAction("QUERY", "SELECT 1")),
        ("DESCRIBE ``\nDESCRIBE concert", SQLAction("DESCRIBE", "concert")),
    ],
)
def test_empty_argument_is_no_action(text: str, expected: SQLAction) -> None:
    assert parse_model_output(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "I am not sure what to do next.", "SELECT * FROM singer", "QUERY:", "ANSWER"],
)
def test_fallback_is_unparsed_query_with_the_raw_text(text: str) -> None:
    assert parse_model_output(text) == SQLAction("QUERY", text.strip(), parsed=False)


def test_windows_line_endings() -> None:
    assert parse_model_output("Thinking\r\nQUERY: SELECT 1\r\nFROM t\r\n\r\nok") == SQLAction(
        "QUERY", "SELECT 1\nFROM t"
    )


@pytest.mark.parametrize(
    "text",
    [
        "QUERY: SELECT '\x00'",
        "\x00\x00\x00",
        "ANSWER: \ud800",
        "\udfff DESCRIBE",
        "x" * 3_000_000,
        " " * 2_000_000 + "QUERY",
        "\n" * 500_000 + "ANSWER: 1",
        "QUERY: " + "SELECT 1\n" * 200_000,
        "```" * 100_000,
        "QUERY ```\n" * 100_000,
        "QUERY\n" * 100_000,
        "\u2028QUERY: SELECT 1\u2029",
    ],
    ids=[
        "nul-in-sql",
        "nul-only",
        "surrogate",
        "surrogate-first",
        "3mb",
        "spaces",
        "newlines",
        "long-query",
        "fences",
        "open-fences",
        "bare-actions",
        "unicode-separators",
    ],
)
def test_hostile_text_never_raises(text: str) -> None:
    action = parse_model_output(text)
    assert action.action_type in ACTION_KINDS
    assert isinstance(action.argument, str)


def test_long_inputs_keep_their_meaning() -> None:
    assert parse_model_output("\n" * 500_000 + "ANSWER: 1") == SQLAction("ANSWER", "1")
    assert parse_model_output("x" * 100_000).parsed is False


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_gives_an_action(text: str) -> None:
    action = parse_model_output(text)
    assert action.action_type in ACTION_KINDS
    assert action.parsed or action.argument == text.strip()
    assert not action.parsed or action.argument.strip()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(ACTION_KINDS),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1),
)
def test_generated_action_lines_parse_to_their_kind(kind: str, argument: str) -> None:
    action = parse_model_output(f"{kind.lower()}: {argument}")
    if action.parsed:
        assert action.action_type == kind
