"""Typed reads and writes of st.query_params: the URL is the page state."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st


def get_str(name: str) -> str | None:
    """A query parameter as text, None when absent or blank."""
    value = st.query_params.get(name)
    return value.strip() or None if isinstance(value, str) else None


def get_int(name: str) -> int | None:
    """A query parameter as an integer, None when absent or not a number."""
    value = get_str(name)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def get_float(name: str) -> float | None:
    """A query parameter as a number, None when absent or not a number."""
    value = get_str(name)
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def get_all(name: str) -> list[str]:
    """Every value of a repeated query parameter, blanks dropped."""
    return [v for v in st.query_params.get_all(name) if v.strip()]


def get_ints(name: str) -> list[int]:
    """Every integer value of a repeated query parameter; others are ignored."""
    return [int(v) for v in get_all(name) if v.strip().lstrip("-").isdigit()]


def get_bool(name: str) -> bool | None:
    """`1`/`true` -> True, `0`/`false` -> False, else None."""
    value = (get_str(name) or "").lower()
    return (
        True if value in {"1", "true", "yes"} else False if value in {"0", "false", "no"} else None
    )


def put(name: str, value: str | int | float | bool | Sequence[str | int] | None) -> None:
    """Set (or remove, for None / empty) a query parameter when it changed."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        if name in st.query_params:
            del st.query_params[name]
        return
    if isinstance(value, bool):
        new: str | list[str] = "1" if value else "0"
    elif isinstance(value, (list, tuple)):
        new = [str(v) for v in value]
    else:
        new = str(value)
    old: str | list[str] = st.query_params.get_all(name)
    if isinstance(new, str):
        old = old[-1] if len(old) == 1 else ""
    if old != new:
        st.query_params[name] = new


def init_state(key: str, value: object) -> None:
    """Seed a widget's session-state value (from the URL) the first time the page renders it."""
    if key not in st.session_state:
        st.session_state[key] = value
