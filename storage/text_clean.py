"""Texts made storable in both databases: PostgreSQL text and JSON cannot hold NUL."""

from __future__ import annotations

from typing import Any, overload


@overload
def clean_text(value: str) -> str: ...
@overload
def clean_text(value: None) -> None: ...
@overload
def clean_text(value: str | None) -> str | None: ...
def clean_text(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL (psycopg raises DataError): U+FFFD stands in for it."""
    return value.replace("\x00", "\ufffd") if value and "\x00" in value else value


def clean_json(value: Any) -> Any:
    """`value` with NUL mapped to U+FFFD in every string (PostgreSQL JSON cannot hold it)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value
