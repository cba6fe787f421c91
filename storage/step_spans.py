"""A step's argument and error stored as spans of its own output and observation.

The parser takes a step's argument from the model's output, and the environment's observation
of a refused action reads `Error: <error>`: stored whole, both were copies, ~120 of a demo
step's ~480 bytes. A span is two character offsets into the source column, `<name>_start` and
`<name>_end`; the text column then holds '' (so `error IS NOT NULL` still means "an error").
A row without a span holds the text itself: written before revision 0009, a text shorter
than a span is worth, or one its source does not contain.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

MIN_SPAN = 4
"""Texts shorter than this stay whole: a span costs two integers and their header bytes."""


ARGUMENT_COLUMNS = ("argument", "argument_start", "argument_end")
ERROR_COLUMNS = ("error", "error_start", "error_end")
"""A step row's columns for its argument and its error: the text, then the span's ends."""


def span_of(source: str, part: str | None) -> tuple[int, int] | None:
    """(start, end) of `part`'s first occurrence in `source`, when it is worth a span."""
    if part is None or len(part) < MIN_SPAN:
        return None
    at = source.find(part)
    return None if at < 0 else (at, at + len(part))


def text_or_span(source: str, text: str | None) -> tuple[str | None, int | None, int | None]:
    """(text column, start, end) for a text of `source`: '' and its span, or the text itself."""
    span = span_of(source, text)
    return (text, None, None) if span is None else ("", span[0], span[1])


def argument_columns(raw_output: str, argument: str) -> dict[str, Any]:
    """The step row's argument columns, for texts already cleaned for the store."""
    return dict(zip(ARGUMENT_COLUMNS, text_or_span(raw_output, argument), strict=True))


def error_columns(observation: str, error: str | None) -> dict[str, Any]:
    """The step row's error columns, for texts already cleaned for the store."""
    return dict(zip(ERROR_COLUMNS, text_or_span(observation, error), strict=True))


def resolved(source: str, stored: str, start: int | None, end: int | None) -> str:
    """The text a row stands for: its span of `source`, or the text it holds."""
    return stored if start is None or end is None else source[start:end]


def resolved_error(
    observation: str, stored: str | None, start: int | None, end: int | None
) -> str | None:
    """A step's error (None: no error)."""
    return None if stored is None else resolved(observation, stored, start, end)


def resolved_sql(
    source: ColumnElement[Any],
    stored: ColumnElement[Any],
    start: ColumnElement[Any],
    end: ColumnElement[Any],
) -> ColumnElement[Any]:
    """`resolved` in SQL (substr counts characters from 1 in SQLite and PostgreSQL alike)."""
    return sa.case(
        (end.is_(None), stored),
        else_=sa.func.substr(source, start + 1, end - start),
    )
