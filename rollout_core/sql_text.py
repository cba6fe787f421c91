"""A small SQL lexer: words and symbols with their parenthesis depth, comments and quotes skipped.

Enough to read a statement's first keyword (the sandbox) and whether ORDER BY sits at a query's
outer level (the grader); not a parser.
"""

from __future__ import annotations

from collections.abc import Iterator

_QUOTE_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}


def tokens(sql: str) -> Iterator[tuple[int, str]]:
    """Yield (parenthesis depth, token) for each token of `sql`.

    A token is an upper-cased word (letters, digits, `_`), the opening character of a quoted
    string or name (its text is skipped), or any other single non-space character. `(` comes
    at the depth outside it and `)` at the depth it closes to. Comments are skipped.
    """
    depth, i, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in _QUOTE_CLOSERS:
            closer = _QUOTE_CLOSERS[ch]
            end = sql.find(closer, i + 1)
            while end >= 0 and ch != "[" and sql.startswith(ch * 2, end):
                end = sql.find(closer, end + 2)  # a doubled quote inside the text
            yield depth, ch
            i = n if end < 0 else end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch.isalnum() or ch == "_":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            yield depth, sql[i:j].upper()
            i = j
        elif ch.isspace():
            i += 1
        else:
            if ch == ")":
                depth = max(0, depth - 1)
            yield depth, ch
            if ch == "(":
                depth += 1
            i += 1


def first_keyword(sql: str) -> str | None:
    """The statement's first token after opening parentheses (None for an empty statement)."""
    return next((token for _, token in tokens(sql) if token != "("), None)


def has_outer_order_by(sql: str) -> bool:
    """True when ORDER BY appears at the outer level (not in a subquery, a string or a comment)."""
    previous = ""
    for depth, token in tokens(sql):
        if depth == 0 and token == "BY" and previous == "ORDER":
            return True
        previous = token if depth == 0 else previous
    return False
