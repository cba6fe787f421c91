"""Texts made storable in both databases: PostgreSQL text and JSON cannot hold NUL, and no
UTF-8 a lone surrogate."""

from __future__ import annotations

from typing import Any, overload

from rollout_core.utf8 import without_lone_surrogates


@overload
def clean_text(value: str) -> str: ...
@overload
def clean_text(value: None) -> None: ...
@overload
def clean_text(value: str | None) -> str | None: ...
def clean_text(value: str | None) -> str | None:
    """`value` with U+FFFD for what neither database can store: NUL (PostgreSQL text cannot
    hold it) and a lone surrogate (no UTF-8 can: a producer's string, a client's JSON escape,
    failed the whole write on both)."""
    if not value:
        return value
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return without_lone_surrogates(value)


def clean_json(value: Any) -> Any:
    """`value` with NUL mapped to U+FFFD in every string (PostgreSQL JSON cannot hold it)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value
