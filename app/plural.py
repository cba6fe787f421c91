"""Counts in words, for the CLI and the dashboard alike."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """`1 episode`, `2 episodes`, `1,024 episodes`."""
    return f"{n:,} {noun}{'s' * (n != 1)}"
