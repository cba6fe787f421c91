"""Guarded replacements for SQLite functions that can run unbounded inside one VM instruction.

The deadline's progress handler only runs between VM instructions. SQLite 3.40's
`printf('%.*c', 1e9, 'x')` loops a billion times inside one, and `instr`, `replace` and `trim`
compare every position with the whole pattern (900 KB trimmed by a 1,000-character set takes
7 s). printf/format refuse widths and precisions beyond the length limit; large instr/replace/
trim calls run in linear Python code. Small calls go to the built-in function, so results match
SQLite exactly.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any, NoReturn


def decode_text(raw: bytes) -> str:
    """SQLite text as str: Spider holds a few non-UTF-8 strings, and no query may fail on them."""
    return raw.decode("utf-8", errors="replace")


# Above this many character comparisons instr/replace/trim run in linear Python code: SQLite's
# quadratic scan would run that long inside one VM instruction, out of the deadline's reach.
_QUADRATIC_WORK = 10_000_000
_PRINTF_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?(.)", re.DOTALL)


class _GuardedFunctions:
    """Replacements for SQLite functions that can run unbounded inside one VM instruction.

    Small calls go to the built-in function on a private in-memory connection, so results
    match SQLite exactly; only calls too large for that take the guarded path.
    """

    def __init__(self, on_refuse: Callable[[str], object], max_bytes: int) -> None:
        self.on_refuse = on_refuse
        self.max_bytes = max_bytes
        # Used only inside a statement of the connection it serves, which one thread holds at a
        # time (the sandbox's pool hands a connection to one caller), so any thread may call it.
        self.builtin = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.builtin.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_bytes)
        self.builtin.text_factory = decode_text  # replace(CAST(x AS BLOB), ...) may not be UTF-8

    def call(self, name: str, *args: Any) -> Any:
        """The built-in function's result for these arguments."""
        placeholders = ", ".join("?" * len(args))
        try:
            return self.builtin.execute(f"SELECT {name}({placeholders})", args).fetchone()[0]
        except sqlite3.Error as exc:
            too_big = "too big" in str(exc)
            reason = f"refused: a value exceeds {self.max_bytes:,} bytes" if too_big else str(exc)
            self.refuse(reason)

    def refuse(self, reason: str) -> NoReturn:
        """Fail the statement with `reason` as the message the agent sees."""
        self.on_refuse(reason)
        raise ValueError(reason)

    def text(self, value: Any) -> str:
        """A value as the text SQLite would read it as."""
        if isinstance(value, str):
            return value
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        # Numbers: SQLite's own text form (Python writes 1e+20 where SQLite writes 1.0e+20).
        return str(self.builtin.execute("SELECT CAST(? AS TEXT)", (value,)).fetchone()[0])

    def printf(self, name: str, *args: Any) -> Any:
        """printf/format, refused when a width or precision would outgrow the length limit."""
        if args and isinstance(args[0], str) and _printf_too_wide(args, self.max_bytes):
            self.refuse(
                f"refused: a value exceeds {self.max_bytes:,} bytes ({name} width or precision)"
            )
        return self.call(name, *args)

    def instr(self, haystack: Any, needle: Any) -> Any:
        """instr(X, Y): 1-based position of Y in X, 0 when absent."""
        if haystack is None or needle is None or not _large(haystack, needle):
            return self.call("instr", haystack, needle)
        if isinstance(haystack, bytes) and isinstance(needle, bytes):
            return haystack.find(needle) + 1
        return self.text(haystack).find(self.text(needle)) + 1

    def replace(self, text: Any, old: Any, new: Any) -> Any:
        """replace(X, Y, Z): every Y in X replaced by Z."""
        if None in (text, old, new) or not _large(text, old):
            return self.call("replace", text, old, new)
        pattern = self.text(old)
        if not pattern:
            return text
        result = self.text(text).replace(pattern, self.text(new))
        if len(result.encode("utf-8", errors="replace")) > self.max_bytes:
            self.refuse(f"refused: a value exceeds {self.max_bytes:,} bytes")
        return result

    def trim(self, name: str, text: Any, chars: Any) -> Any:
        """trim/ltrim/rtrim(X, Y): X without the characters of Y at its ends."""
        if text is None or chars is None or not _large(text, chars):
            return self.call(name, text, chars)
        value, drop = self.text(text), set(self.text(chars))
        start, end = 0, len(value)
        if name != "rtrim":
            while start < end and value[start] in drop:
                start += 1
        if name != "ltrim":
            while end > start and value[end - 1] in drop:
                end -= 1
        return value[start:end]


def _large(a: Any, b: Any) -> bool:
    """True when comparing every position of `a` with all of `b` is too much work."""
    sizes = [len(v) if isinstance(v, str | bytes) else 32 for v in (a, b)]
    return sizes[0] * sizes[1] > _QUADRATIC_WORK


def _printf_too_wide(args: tuple[Any, ...], max_bytes: int) -> bool:
    """True when a conversion of printf's format asks for a width or precision over the cap."""
    position = 1
    for spec in _PRINTF_SPEC.finditer(args[0]):
        width, precision, conversion = spec.groups()
        if conversion == "%":
            continue
        for part in (width, precision):
            if part == "*":
                value = args[position] if position < len(args) else 0
                position += 1
            else:
                value = part or 0
            if abs(_as_int(value)) > max_bytes:
                return True
        position += 1
    return False


def _as_int(value: Any) -> int:
    """An argument read as SQLite reads a width (numeric text counts); 0 when not a number."""
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return 0
    return int(number) if number == number and abs(number) != float("inf") else 2**62


def install_guarded_functions(
    conn: sqlite3.Connection, on_refuse: Callable[[str], object], max_bytes: int
) -> None:
    """Register the guarded printf, format, instr, replace and 2-argument trims on `conn`.

    `on_refuse` hears why a call was refused (the statement then fails with that reason);
    `max_bytes` is the connection's SQLITE_LIMIT_LENGTH.
    """
    funcs = _GuardedFunctions(on_refuse, max_bytes)
    for name in ("printf", "format"):
        conn.create_function(name, -1, lambda *a, _n=name: funcs.printf(_n, *a), deterministic=True)
    conn.create_function("instr", 2, funcs.instr, deterministic=True)
    conn.create_function("replace", 3, funcs.replace, deterministic=True)
    for name in ("trim", "ltrim", "rtrim"):
        conn.create_function(
            name, 2, lambda t, c, _n=name: funcs.trim(_n, t, c), deterministic=True
        )
