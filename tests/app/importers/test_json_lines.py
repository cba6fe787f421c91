"""A rollout line reads as Python's json reads it, and stored messages read back as they were
written, whichever JSON library did the work (orjson, with json for what it refuses)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.importers.source import BadRow, json_object
from rollout_core.utf8 import holds_lone_surrogate, json_without_lone_surrogates
from storage.prompts import messages_json

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_VALID_TEXT = st.text()  # no lone surrogates: those read as U+FFFD (below)


@given(st.dictionaries(_VALID_TEXT, _VALUES, max_size=5))
def test_a_line_reads_as_json_reads_it(data: dict[str, Any]) -> None:
    line = json.dumps(data).encode()
    expected = json.loads(line)
    got = json_object(line)
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)  # 1 stays an int, 1.0 a float


def test_what_json_alone_reads_is_read_as_json_reads_it() -> None:
    got = json_object(b'{"score": NaN, "big": Infinity, "low": -Infinity}')
    assert math.isnan(got["score"]) and got["big"] == math.inf and got["low"] == -math.inf
    assert json_object(b'{"a": "\\ud800 x"}') == {"a": "\ufffd x"}
    assert json_object(b'{"a": "\xff x"}') == {"a": "\ufffd x"}
    assert json_object(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"a": 1', "not JSON (Expecting ',' delimiter at column 8)"),
        (b"[1, 2]", "a list, not a JSON object"),
        (b'"text"', "text, not a JSON object"),
        (b"null", "null, not a JSON object"),
        (b"\xef\xbb\xbf{}", "not JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1)"),
    ],
)
def test_a_line_that_is_no_object_says_why(line: bytes, problem: str) -> None:
    with pytest.raises(BadRow) as caught:
        json_object(line)
    assert str(caught.value) == problem


@pytest.mark.parametrize(
    ("number", "read"),
    [
        (b"18446744073709551615", 2**64 - 1),  # 64 bits: an int
        (b"1180591620717411303424", 2.0**70),  # past 64 bits: a float, by orjson
        (b"1" + b"0" * 400, math.inf),  # past a float: json's int, which no float() took
        (b"-1" + b"0" * 5_000, -math.inf),  # past the digits Python's int() reads: ValueError
    ],
    ids=["64 bits", "70 bits", "401 digits", "5,001 digits"],
)
def test_a_whole_number_reads_as_orjson_reads_it(number: bytes, read: float) -> None:
    got = json_object(b'{"a": ' + number + b"}")["a"]
    assert got == read and type(got) is type(read)


def _nested(levels: int, escape: str = "") -> bytes:
    """An object whose one field holds lists `levels` deep (the object itself is one more)."""
    return b'{"a": ' + b"[" * levels + f'"{escape}"'.encode() + b"]" * levels + b"}"


DEEP = "lists or objects nested more than 100 levels deep, past what the store keeps"


@pytest.mark.parametrize(
    "line",
    [
        _nested(100),  # read by orjson, and deeper than the store keeps
        _nested(2_000),  # past orjson's depth; json ran out of stack (a RecursionError)
        _nested(900, escape="\\ud800"),  # json reads it; fixing the surrogate ran out of stack
    ],
    ids=["101 levels", "2,001 levels", "901 levels, a lone surrogate"],
)
def test_a_line_nested_deeper_than_the_store_keeps_is_a_bad_row(line: bytes) -> None:
    with pytest.raises(BadRow) as caught:
        json_object(line)
    assert str(caught.value) == DEEP


def test_a_line_nested_as_deep_as_the_store_keeps_is_read() -> None:
    assert json_object(_nested(99))["a"] == json.loads(_nested(99))["a"]


_FINITE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_infinity=False, allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.text() | st.text().map(lambda t: t + "\ud800"),
    },
    optional={"extra": _FINITE},
)


@given(st.lists(_MESSAGE, max_size=4))
def test_stored_messages_read_back_as_written(messages: list[dict[str, Any]]) -> None:
    """Integers past 64 bits included (json writes those); a lone surrogate, which no UTF-8
    holds (nor a store: the text failed its write), reads back as U+FFFD."""
    text = messages_json(messages)
    assert not holds_lone_surrogate(text)
    assert json.loads(text) == json_without_lone_surrogates(messages)


def test_a_number_json_cannot_hold_is_stored_as_null() -> None:
    """Valid JSON, which PostgreSQL's json type and every reader takes: NaN is no JSON."""
    text = messages_json([{"role": "tool", "content": "x", "score": math.nan, "top": math.inf}])
    assert json.loads(text) == [{"role": "tool", "content": "x", "score": None, "top": None}]
