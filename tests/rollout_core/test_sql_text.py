"""The small SQL lexer behind the sandbox's first-keyword check and the grader's ORDER BY test."""

from __future__ import annotations

import pytest

from rollout_core.sql_text import first_keyword, has_outer_order_by, tokens


@pytest.mark.parametrize(
    ("sql", "word"),
    [
        ("select 1", "SELECT"),
        ("  -- note\n /* block */ ((with x as (select 1) select * from x))", "WITH"),
        ("'text'", "'"),
        ('"name"', '"'),
        ("1abc", "1ABC"),
        (";", ";"),
        ("  /* only a comment */ ", None),
        ("", None),
    ],
)
def test_first_keyword(sql: str, word: str | None) -> None:
    assert first_keyword(sql) == word


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("SELECT a FROM t order\n/* why */ by a DESC LIMIT 3", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) LIMIT 3", False),
        ("SELECT 'ORDER BY' FROM t", False),
        ("SELECT [order by] FROM t", False),
        ("SELECT 'it''s ORDER BY' FROM t", False),
        ("SELECT a FROM t -- ORDER BY a", False),
        ("SELECT a FROM t WHERE b IN (SELECT b FROM u ORDER BY b) ORDER BY a", True),
        ("SELECT order_by FROM t", False),
    ],
)
def test_outer_order_by(sql: str, ordered: bool) -> None:
    assert has_outer_order_by(sql) is ordered


def test_depth_of_parentheses() -> None:
    assert list(tokens("f(a, (b))")) == [
        (0, "F"), (0, "("), (1, "A"), (1, ","), (1, "("), (2, "B"), (1, ")"), (0, ")"),
    ]  # fmt: skip
