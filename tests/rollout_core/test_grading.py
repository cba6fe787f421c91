"""Grading rules, one parametrized table per rule, and the oracle's canonical answers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_core import grading
from rollout_core.grading import GoldResult, GradingError, format_answer, grade_answer
from rollout_core.sql_text import has_outer_order_by


def gold(
    rows: list[tuple[Any, ...]], columns: int | None = None, ordered: bool = False
) -> GoldResult:
    width = columns if columns is not None else (len(rows[0]) if rows else 1)
    return GoldResult([f"c{i}" for i in range(width)], rows, ordered)


@pytest.mark.parametrize(
    ("answer", "cell", "expected"),
    [
        ("6", 6, True),
        ("6.0", 6, True),
        ("6.00", 6, True),
        ('"6"', 6, True),
        ("6", 6.0, True),
        ("6", "6", True),
        ("6", 6.5, False),
        ("7", 6, False),
        ("1e3", 1000, True),
        ("1,234", 1234, True),
        ("-2", -2, True),
        ("58.33", 58.3333333, True),
        ("58.333", 58.3333333, True),
        ("58.3", 58.3333333, False),
        ("58.34", 58.3333333, False),
        ("58", 58.3333333, False),
        ("0.67", 2 / 3, True),
        ("0.66", 2 / 3, False),
        ("58.333333333333336", 58.333333333333336, True),
        ("1990", "1990", True),
        ("1990.0", "1990", True),
        # Whole numbers are exact: a float's tolerance took these (Spider's GNP and phones).
        ("1000000001", 1000000000, False),
        ("3705025703", 3705025700.0, False),
        ("3705025700", 3705025700.0, True),
        ("7182887240", 7182887233, False),
        ("9007199254740993", 9007199254740992, False),  # past 2**53, floats are equal
        ("1e18", 10**18, True),
        ("0.3", 0.1 + 0.2, True),
    ],
)
def test_numbers_compare_numerically(answer: str, cell: Any, expected: bool) -> None:
    assert grade_answer(answer, gold([(cell,)])) is expected


@pytest.mark.parametrize(
    ("answer", "cell", "expected"),
    [
        ("Paris", "Paris", True),
        ("  paris ", "Paris", True),
        ('"PARIS"', "Paris", True),
        ("'Paris'", "Paris", True),
        ("APG", " APG", True),
        ("New  York", "New York", True),
        ("Pari", "Paris", False),
        ("Paris, France", "Paris", False),
        ("Smith, John", "Smith, John", True),
        ('["Smith, John"]', "Smith, John", True),
        ("T", "T", True),
        ("F", "T", False),
    ],
)
def test_strings_compare_trimmed_and_case_insensitive(
    answer: str, cell: Any, expected: bool
) -> None:
    assert grade_answer(answer, gold([(cell,)])) is expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("null", True), ("NULL", True), ("None", True), ("[null]", True), ("0", False), ("[]", False)],
)
def test_null_gold(answer: str, expected: bool) -> None:
    assert grade_answer(answer, gold([(None,)])) is expected


def test_null_inside_rows() -> None:
    rows = [("a", None), ("b", 2)]
    assert grade_answer('[["a", null], ["b", 2]]', gold(rows))
    assert grade_answer("a, NULL\nb, 2", gold(rows))
    assert not grade_answer('[["a", 0], ["b", 2]]', gold(rows))


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("hello", True),
        ("HELLO", True),
        ("68656c6c6f", True),
        ("x'68656c6c6f'", True),
        ("bye", False),
    ],
)
def test_blob_gold(answer: str, expected: bool) -> None:
    assert grade_answer(answer, gold([(b"hello",)])) is expected


@pytest.mark.parametrize(
    "answer",
    [
        '["a", "b", "c"]',
        '["c", "a", "b"]',
        "a, b, c",
        "c,a,b",
        "a\nb\nc",
        "- a\n- b\n- c",
        '[["a"], ["b"], ["c"]]',
        "['a', 'b', 'c']",
        '```json\n["b", "a", "c"]\n```',
    ],
)
def test_single_column_as_flat_list_any_order(answer: str) -> None:
    assert grade_answer(answer, gold([("a",), ("b",), ("c",)]))


@pytest.mark.parametrize("answer", ['["a", "b"]', "a, b, c, d", "a\nb\nb", '["a", "b", "c", "c"]'])
def test_single_column_wrong_multiset(answer: str) -> None:
    assert not grade_answer(answer, gold([("a",), ("b",), ("c",)]))


def test_duplicates_count() -> None:
    g = gold([("a",), ("a",), ("b",)])
    assert grade_answer("a, a, b", g)
    assert not grade_answer("a, b, b", g)
    assert not grade_answer("a, b", g)


@pytest.mark.parametrize(
    "answer",
    [
        '["Paris", 5]',
        "Paris, 5",
        "Paris | 5",
        "Paris\t5",
        '[["Paris", 5]]',
        '{"city": "Paris", "n": 5}',
        "('Paris', 5)",
        "Paris\n5",
    ],
)
def test_single_row_as_values_in_column_order(answer: str) -> None:
    assert grade_answer(answer, gold([("Paris", 5)]))


@pytest.mark.parametrize("answer", ['[5, "Paris"]', "5, Paris", "Paris", "Paris, 5, 6"])
def test_single_row_wrong_order_or_shape(answer: str) -> None:
    assert not grade_answer(answer, gold([("Paris", 5)]))


@pytest.mark.parametrize(
    ("answer", "ordered", "expected"),
    [
        ('[["a", 1], ["b", 2]]', False, True),
        ('[["b", 2], ["a", 1]]', False, True),
        ('[["b", 2], ["a", 1]]', True, False),
        ('[["a", 1], ["b", 2]]', True, True),
        ("a, 1\nb, 2", True, True),
        ("b | 2\na | 1", False, True),
        ("[('b', 2), ('a', 1)]", False, True),
        ('[{"x": "a", "y": 1}, {"x": "b", "y": 2}]', False, True),
        ('[["a", 1], ["b", 3]]', False, False),
        ('[["a", 1]]', False, False),
        ('["a", 1, "b", 2]', False, False),
    ],
)
def test_multi_row_multi_column(answer: str, ordered: bool, expected: bool) -> None:
    assert grade_answer(answer, gold([("a", 1), ("b", 2)], ordered=ordered)) is expected


def test_ordered_single_column() -> None:
    g = gold([(3,), (1,), (2,)], ordered=True)
    assert grade_answer("[3, 1, 2]", g)
    assert grade_answer("3\n1\n2", g)
    assert not grade_answer("[1, 2, 3]", g)


def test_rounding_inside_unordered_rows() -> None:
    """Rounded answers can sort differently from the gold; pairing still finds the match."""
    g = gold([(1.231, "b"), (1.234, "a")])
    assert grade_answer('[["1.23", "a"], ["1.23", "b"]]', g)
    assert not grade_answer('[["1.23", "a"], ["1.24", "b"]]', g)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("[]", True),
        ("[[]]", True),
        ("no rows", True),
        ("No rows.", True),
        ("none", True),
        ("EMPTY", True),
        ("(no rows)", True),
        ("no results", True),
        ("0", False),
        ("null", False),
        ("[0]", False),
        ("nothing to see", False),
    ],
)
def test_empty_gold(answer: str, expected: bool) -> None:
    assert grade_answer(answer, gold([], columns=2)) is expected


@pytest.mark.parametrize("answer", ["[]", "none", "no rows"])
def test_empty_words_do_not_match_a_non_empty_gold(answer: str) -> None:
    assert not grade_answer(answer, gold([(0,)]))
    assert not grade_answer(answer, gold([("a",), ("b",)]))


@pytest.mark.parametrize(
    "answer",
    ["", "\x00", "\ud800", "[" * 10_000, "{" * 5_000, "x" * 3_000_000, "1e999999", "NaN", "[1,"],
    ids=["empty", "nul", "surrogate", "deep-json", "deep-dict", "huge", "huge-exp", "nan", "cut"],
)
def test_grade_never_raises(answer: str) -> None:
    assert grade_answer(answer, gold([(1,)])) is False


def test_grade_answer_with_non_text_answer() -> None:
    assert grade_answer(5, gold([(5,)])) is True  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT name FROM singer ORDER BY age", True),
        ("select name from singer order  by age desc limit 1", True),
        ("SELECT name FROM singer", False),
        ("SELECT * FROM (SELECT name FROM singer ORDER BY age)", False),
        ("SELECT name FROM t WHERE id IN (SELECT id FROM u ORDER BY x LIMIT 3)", False),
        ("SELECT 'ORDER BY' FROM t", False),
        ('SELECT "order by" FROM t', False),
        ("SELECT [order by] FROM t", False),
        ("SELECT a FROM t -- ORDER BY a", False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ("SELECT 'it''s' FROM t ORDER BY a", True),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT rank() OVER (ORDER BY a) FROM t", False),
        ("SELECT a FROM t ORDERBY", False),
        ("SELECT border, by_x FROM t", False),
        ("SELECT a FROM t ORDER\nBY a", True),
    ],
)
def test_outer_order_by_makes_the_gold_ordered(sql: str, ordered: bool) -> None:
    assert has_outer_order_by(sql) is ordered


def test_a_grader_failure_raises_instead_of_grading_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> bool:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(grading, "_rows_match", broken)
    with pytest.raises(GradingError, match=r"^ZeroDivisionError: division by zero$") as info:
        grade_answer("5", gold([(5,)]))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize(
    ("rows", "columns", "text"),
    [
        ([], 1, "[]"),
        ([], 3, "[]"),
        ([(5,)], 1, "5"),
        ([("Paris",)], 1, '"Paris"'),
        ([(None,)], 1, "null"),
        ([(58.333333333333336,)], 1, "58.333333333333336"),
        ([(1,), (2,)], 1, "[1, 2]"),
        ([("a", 1)], 2, '[["a", 1]]'),
        ([("a", 1), ("b", None)], 2, '[["a", 1], ["b", null]]'),
        ([(b"hi",)], 1, '"hi"'),
    ],
)
def test_format_answer(rows: list[tuple[Any, ...]], columns: int, text: str) -> None:
    assert format_answer(rows, columns) == text


@pytest.mark.parametrize(
    "rows",
    [
        [("[1, 2]",)],
        [("null",)],
        [("none",)],
        [("a, b",), ("c",)],
        [("line\nbreak", 1)],
        [('say "hi"', "x")],
        [(float("inf"),)],
        [(0.1 + 0.2,)],
        [(2**62,)],
        [(b"\xff\x00",)],
        [("",)],
        [("  padded  ", "a|b")],
    ],
)
def test_format_answer_round_trips_tricky_values(rows: list[tuple[Any, ...]]) -> None:
    g = gold(rows)
    assert grade_answer(format_answer(rows, len(rows[0])), g)


_cells = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=4).flatmap(
        lambda width: st.tuples(
            st.just(width),
            st.lists(st.tuples(*[_cells] * width), max_size=8),
            st.booleans(),
        )
    )
)
def test_format_answer_always_grades_correct(case: tuple[int, list[tuple[Any, ...]], bool]) -> None:
    width, rows, ordered = case
    g = GoldResult([f"c{i}" for i in range(width)], rows, ordered)
    assert grade_answer(format_answer(rows, width), g)
