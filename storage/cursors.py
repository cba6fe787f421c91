"""Opaque keyset cursors: the last row's sort key, as URL-safe base64 JSON."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def encode_cursor(**key: Any) -> str:
    """A cursor carrying the given JSON-serializable key."""
    raw = json.dumps(key, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, expect: dict[str, Any] | None = None) -> dict[str, Any]:
    """The key inside a cursor; ValueError when it is malformed or made for another query."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise ValueError(
            f"invalid page cursor {cursor!r}; start again from the first page"
        ) from None
    if not isinstance(key, dict):
        raise ValueError(f"invalid page cursor {cursor!r}; start again from the first page")
    for name, value in (expect or {}).items():
        if key.get(name) != value:
            raise ValueError(
                f"page cursor was made for {name}={key.get(name)!r}, not {value!r}; "
                "start again from the first page"
            )
    return key
