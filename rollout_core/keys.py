"""The names the store keys on (a question's or a database's id, a reward's name, a run's
name): what one may be, checked where each comes in from outside."""

from __future__ import annotations

import unicodedata

from rollout_core.utf8 import holds_lone_surrogate

KEY_CHARS = 200
"""The longest such name: the store's columns for them hold 200 characters (PostgreSQL
refuses a longer one; SQLite would keep it whole)."""


def key_problem(value: str) -> str | None:
    """Why `value` cannot be stored as such a name, or None when it can."""
    if len(value) > KEY_CHARS:
        return f"is {len(value):,} characters long; the store keeps at most {KEY_CHARS}"
    if "\x00" in value:
        return "holds a NUL character, which the store cannot keep"
    if holds_lone_surrogate(value):
        return "holds a lone surrogate (no UTF-8 text can), which the store cannot keep"
    return None


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot name a run, or None when it can: a key's problems, digits alone,
    which every command and page reads as a run's id (`find_run`), and a line break or a
    control character, which would split it in every table and header that shows it."""
    if (number := name.strip()).isdecimal():
        return f"{number!r} is a number, which names the run of that id where a run is asked for"
    if problem := key_problem(name):
        return problem
    if any(unicodedata.category(ch) in _BREAKING for ch in name):
        return "holds a line break, a tab or a control character"
    return None


_BREAKING = frozenset({"Cc", "Zl", "Zp"})
"""Unicode categories of control characters and line and paragraph separators."""
