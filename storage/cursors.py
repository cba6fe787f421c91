"""Opaque keyset cursors: the last row's sort key, as URL-safe base64 JSON."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

FILTERS = "filters"
"""The cursor key holding `filters_digest` of the list it pages: a cursor from a link whose
filters were changed by hand pages another list, from the wrong place."""


def filters_digest(filters: Any) -> str:
    """A short digest of a list's filters (any value with a stable repr: a frozen dataclass)."""
    return hashlib.blake2s(repr(filters).encode(), digest_size=6).hexdigest()


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
        if name == FILTERS and name not in key:
            continue  # a link saved before cursors carried their filters: read as before
        if key.get(name) != value:
            made = (
                "other filters" if name == FILTERS else f"{name}={key.get(name)!r}, not {value!r}"
            )
            raise ValueError(f"page cursor was made for {made}; start again from the first page")
    return key
