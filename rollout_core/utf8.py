"""Text UTF-8 can hold. A lone surrogate (a JSON escape such as \\ud800, a string decoded with
surrogateescape) is a Python character with no UTF-8 form: a write, a tokenizer or a JSON
encoder given one fails. Text from outside is made whole with U+FFFD in its place."""

from __future__ import annotations

from typing import Any


def holds_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a character no UTF-8 can (ASCII text is checked in one step)."""
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def without_lone_surrogates(text: str) -> str:
    """`text` with U+FFFD for each lone surrogate (a surrogate pair becomes its character)."""
    if not holds_lone_surrogate(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def json_without_lone_surrogates(value: Any) -> Any:
    """Parsed JSON with every string, keys too, made whole."""
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, dict):
        return {
            json_without_lone_surrogates(k): json_without_lone_surrogates(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [json_without_lone_surrogates(v) for v in value]
    return value
