"""A store failing under a command (a full disk, a disk error, a server gone) told apart from a
bug: the first is one line naming the cause and the fix, the second keeps its traceback."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreTrouble:
    """Why the store failed and what the user can do about it."""

    cause: str
    """e.g. `the store's disk is full (database or disk is full)`."""
    fix: str
    """e.g. `free space on that disk`."""
    code: int = 1
    """The exit code: 1 for a store that failed, 2 for one this user may not write (as
    for a read-only SQLite file)."""


# SQLite's result codes (sqlite3.Error.sqlite_errorname), by prefix; anything else (a syntax
# error, a missing column) is rollscope's own bug.
_SQLITE = (
    ("SQLITE_FULL", "the store's disk is full", "free space on that disk"),
    ("SQLITE_IOERR", "the store's disk failed a read or write", "check that disk"),
    ("SQLITE_READONLY", "the store became read-only", "make its file and folder writable"),
    ("SQLITE_CANTOPEN", "the store's file could not be opened", "check its path"),
    ("SQLITE_CORRUPT", "the store's file is damaged", "restore it from a copy"),
    ("SQLITE_NOTADB", "the store's file is damaged", "restore it from a copy"),
    ("SQLITE_BUSY", "another process held the store's lock too long", "wait for it to finish"),
    ("SQLITE_LOCKED", "another process held the store's lock too long", "wait for it to finish"),
)
# PostgreSQL's SQLSTATE classes: resources (53), connection (08), shutdown (57P), system (58).
_POSTGRES = (
    ("53100", "the store server's disk is full", "free space on the database server"),
    ("53", "the store server ran out of resources", "check the database server"),
    ("08", "the connection to the store server was lost", "check that the server is up"),
    ("57P", "the store server shut down", "start it again"),
    ("58", "the store server failed a read or write", "check the database server"),
)


def store_trouble(exc: BaseException) -> StoreTrouble | None:
    """The trouble a user meets in `exc` or what caused it; None when it is a bug."""
    for link in _chain(exc):
        found = _classify(link)
        if found is not None:
            return found
    return None


def number_out_of_range(exc: BaseException) -> bool:
    """Whether the store refused a number the command gave as past what its columns hold
    (sqlite3's OverflowError binding it, PostgreSQL's SQLSTATE 22003): bad input."""
    return any(
        (isinstance(link, OverflowError) and "SQLite INTEGER" in str(link))
        or (getattr(link, "sqlstate", None) or getattr(link, "pgcode", None)) == "22003"
        for link in _chain(exc)
    )


def _classify(exc: BaseException) -> StoreTrouble | None:
    detail = _first_line(exc)
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        for prefix, cause, fix in _SQLITE:
            if name.startswith(prefix):
                return StoreTrouble(f"{cause} ({detail})", fix)
        return None
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)  # psycopg 3, 2
    if state == "42501":  # insufficient_privilege: a user that may only read
        return StoreTrouble(
            f"this database user may not write the store ({detail})",
            "use a user with write rights on its tables, or a command that only reads it "
            "(runs, show, export, dashboard)",
            code=2,
        )
    if isinstance(state, str):
        for prefix, cause, fix in _POSTGRES:
            if state.startswith(prefix):
                return StoreTrouble(f"{cause} ({detail})", fix)
        return None
    if _driver_connection_error(exc):
        return StoreTrouble(
            f"the store server could not be reached ({detail})", "check that the server is up"
        )
    if getattr(exc, "connection_invalidated", False):  # SQLAlchemy saw the connection drop
        said = _first_line(getattr(exc, "orig", None) or exc)  # the driver's words alone
        return StoreTrouble(f"the connection to the store was lost ({said})", "check the store")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return StoreTrouble(f"the disk is full ({exc.strerror or detail})", "free space on it")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _driver_connection_error(exc: BaseException) -> bool:
    """psycopg's OperationalError without a SQLSTATE: no server answered (refused, shutting
    down, the connection lost). Matched by its shape: the CLI does not import the driver."""
    kind = type(exc)
    return (
        kind.__name__ == "OperationalError"
        and kind.__module__.partition(".")[0] in {"psycopg", "psycopg2"}
        and getattr(exc, "sqlstate", getattr(exc, "pgcode", None)) is None
    )


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, the driver error SQLAlchemy wraps (`.orig`) and what caused them, each once (not
    what was being handled: a bug raised there stays a bug)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        link = todo.pop(0)
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        orig = getattr(link, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, link.__cause__]
