"""Text cut to a width for a message: a value from outside (a path, an id, a host) may be as
long as its sender made it, and a one-line error must stay one line a person can read."""

from __future__ import annotations


def clip(text: str, width: int) -> str:
    """`text` when it fits in `width` characters, else its start and "..." in that width."""
    return text if len(text) <= width else text[: width - 3] + "..."
