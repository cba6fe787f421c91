"""executemany for the write path's hot statements, straight to the driver.

At the runner's rates (tens of thousands of step rows a second), SQLAlchemy's per-row
parameter handling (a dict per row, compiled-parameter processing) costs about as much as
SQLite's own insert (measured: ORM bulk insert 2.4x slower than the driver's executemany, Core
1.8x). On SQLite the rows go to the driver as tuples, each value converted by its type's
own bind processor where it has one (floats made floats: numpy scalars reach the store).
On PostgreSQL a plain INSERT's rows go by COPY FROM STDIN: psycopg's executemany sends a
statement a row, and SQLAlchemy's multi-row INSERT ... RETURNING is parsed again at each
call (too long for psycopg's cache); new episodes' ids are drawn from their sequence first.
Other backends, and statements whose defaults SQLAlchemy fills in, go through SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from functools import lru_cache
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import (
    Boolean,
    Connection,
    Dialect,
    Float,
    Insert,
    LargeBinary,
    Table,
    TableClause,
    insert,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

# Types whose SQLite bind processing the driver does alike: bool is an int to sqlite3, bytes
# bind as a blob.
_NATIVE = (Boolean, LargeBinary)
# Types whose values `_plan` converts itself, as SQLAlchemy would: float(value) unless None.
_FLOATS = (Float,)


def executemany(
    session: Session | Connection, stmt: UpdateBase, rows: Sequence[dict[str, Any]]
) -> None:
    """Execute `stmt` once per row (all rows with the same keys) in the caller's transaction."""
    if not rows:
        return
    conn = session.connection() if isinstance(session, Session) else session
    keys = tuple(rows[0])
    if _copied(stmt, keys, conn.dialect):
        _copy(conn, cast(Insert, stmt).table, keys, ([r[k] for k in keys] for r in rows))
        return
    plan = _plan(stmt, keys, conn.dialect, False) if conn.dialect.name == "sqlite" else None
    if plan is None:
        conn.execute(stmt, list(rows))
        return
    _run(conn, plan, rows)


def executemany_values(
    session: Session | Connection,
    stmt: UpdateBase,
    keys: tuple[str, ...],
    rows: Sequence[Sequence[Any]],
    *,
    floats_exact: bool = False,
) -> None:
    """`executemany` for rows given as their values in `keys`' order: no dict a row, for the
    widest rows of the write path (a step's). `floats_exact`: the caller made each value of a
    Float column a float or None, so no row needs converting."""
    if not rows:
        return
    conn = session.connection() if isinstance(session, Session) else session
    if _copied(stmt, keys, conn.dialect):
        _copy(conn, cast(Insert, stmt).table, keys, rows)
        return
    plan = (
        _plan(stmt, keys, conn.dialect, True, floats_exact)
        if conn.dialect.name == "sqlite"
        else None
    )
    if plan is None:
        conn.execute(stmt, [dict(zip(keys, r, strict=True)) for r in rows])
        return
    sql, values = plan
    if values is _same:
        sql, rows = _nulls_inlined(sql, rows)
    _run(conn, (sql, values), rows)


def _nulls_inlined(sql: str, rows: Sequence[Sequence[Any]]) -> tuple[str, Sequence[Any]]:
    """An INSERT whose columns that are NULL in every row say NULL in its text, and the rows
    without them (NULL, as a bound None is; never the column's default).

    sqlite3 binds an int, float, str or bytearray as it is, and looks anything else up in its
    adapter registry first: a None, and a bool or bytes too (write those as ints and
    bytearrays). The NULL columns of a batch of steps (no token traces, no cached-token
    counts) would cost as much to bind as the rest of the row.
    """
    head, found, values = sql.rpartition(" VALUES (")
    slots = values.removesuffix(")").split(", ")
    if not found or not values.endswith(")") or any(s != "?" for s in slots):
        return sql, rows
    width = len(rows[0])
    nulls = [i for i in range(width) if all(r[i] is None for r in rows)]
    if not nulls:
        return sql, rows
    for i in nulls:
        slots[i] = "NULL"
    kept = [i for i in range(width) if i not in nulls]
    if not kept:
        return f"{head} VALUES ({', '.join(slots)})", [()] * len(rows)
    pick = itemgetter(*kept)
    picked = [pick(r) for r in rows] if len(kept) > 1 else [(pick(r),) for r in rows]
    return f"{head} VALUES ({', '.join(slots)})", picked


# SQLite's limit on a statement's parameters (SQLITE_MAX_VARIABLE_NUMBER, since 3.32).
_SQLITE_MAX_PARAMETERS = 32_766


def chunks(n: int, most: int) -> list[tuple[int, int]]:
    """(start, size) of chunks covering n items, each size a power of two and at most `most`.

    A statement that binds a chunk's values has a text per size: with sizes of powers of two
    a few texts serve every write, and the driver reuses each prepared statement (preparing a
    statement of a thousand rows' values cost more than running it).
    """
    most = 1 << (max(most, 1).bit_length() - 1)
    out, start = [], 0
    while start < n:
        size = min(most, 1 << ((n - start).bit_length() - 1))
        out.append((start, size))
        start += size
    return out


def insert_returning(
    session: Session | Connection,
    table: Table,
    keys: tuple[str, ...],
    rows: Sequence[Sequence[Any]],
    returning: tuple[str, ...],
) -> list[tuple[Any, ...]]:
    """Insert rows given as their values in `keys`' order; each new row's `returning` columns.

    On SQLite one multi-row INSERT ... RETURNING per chunk of rows goes to the driver:
    SQLAlchemy's own (a bound-parameter dict and a pass over it per row) cost as much as
    SQLite's insert into the twelve indexes of `episodes`. On PostgreSQL, where `returning`
    is the table's serial `id` and columns among `keys`, the ids are drawn from its sequence
    and the rows go by COPY with them.
    """
    if not rows:
        return []
    conn = session.connection() if isinstance(session, Session) else session
    if (
        returning[0] == "id"
        and "id" not in keys
        and set(returning[1:]) <= set(keys)
        and _copied(_insert_into(table), ("id", *keys), conn.dialect)
    ):
        ids = _next_ids(conn, table, len(rows))
        _copy(conn, table, ("id", *keys), ((i, *r) for i, r in zip(ids, rows, strict=True)))
        at = [keys.index(c) for c in returning[1:]]
        return [(i, *(r[j] for j in at)) for i, r in zip(ids, rows, strict=True)]
    plan = (
        _plan(_insert_into(table), keys, conn.dialect, True)
        if conn.dialect.name == "sqlite"
        else None
    )
    if plan is None:
        stmt = insert(table).returning(*(table.c[c] for c in returning))
        return [
            tuple(r) for r in conn.execute(stmt, [dict(zip(keys, r, strict=True)) for r in rows])
        ]
    sql, values = plan
    head, _, one_row = sql.partition(" VALUES ")
    tail = " RETURNING " + ", ".join(returning)
    return fetch_driver(
        conn,
        (
            (
                f"{head} VALUES {', '.join([one_row] * size)}{tail}",
                [v for r in rows[start : start + size] for v in values(r)],
            )
            for start, size in chunks(len(rows), _SQLITE_MAX_PARAMETERS // len(keys))
        ),
    )


def fetch_driver(
    conn: Connection, statements: Iterable[tuple[str, Sequence[Any]]]
) -> list[tuple[Any, ...]]:
    """Each (SQL, parameters) in turn on the connection's driver cursor, in its transaction;
    the rows they return. Past SQLAlchemy's per-execution bookkeeping (result metadata, a
    cursor wrapper), which cost a small statement ten times its run."""
    out: list[tuple[Any, ...]] = []
    with closing(conn.connection.cursor()) as cursor:
        for sql, parameters in statements:
            with _raised_as_sqlalchemy(conn, sql):
                cursor.execute(sql, parameters)
            out.extend(cursor.fetchall())
    return out


@contextmanager
def _raised_as_sqlalchemy(conn: Connection, sql: str) -> Iterator[None]:
    """A driver error in the block raised as SQLAlchemy would raise it: callers tell a lock
    (retried) or a duplicate by its class."""
    dbapi_error = conn.dialect.loaded_dbapi.Error
    try:
        yield
    except dbapi_error as exc:
        raise DBAPIError.instance(sql, None, exc, dbapi_error) from exc


@lru_cache(maxsize=64)
def _copied(stmt: UpdateBase, keys: tuple[str, ...], dialect: Dialect) -> bool:
    """Whether `stmt`'s rows go by COPY: on PostgreSQL through psycopg 3 (psycopg2's cursor
    copies otherwise), a plain INSERT of exactly `keys` (no RETURNING, no ON CONFLICT, no
    value or default SQLAlchemy fills in)."""
    if (dialect.name, dialect.driver) != ("postgresql", "psycopg") or type(stmt) is not Insert:
        return False
    if stmt.returning_column_descriptions:
        return False
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
    return set(compiled.binds) == set(keys)


def _copy(conn: Connection, table: TableClause, keys: Sequence[str], rows: Iterable[Any]) -> None:
    """COPY rows (values in `keys`' order) into the table, in the caller's transaction."""
    quote = conn.dialect.identifier_preparer.quote
    sql = f"COPY {quote(table.name)} ({', '.join(map(quote, keys))}) FROM STDIN"
    with (
        closing(conn.connection.cursor()) as cursor,
        _raised_as_sqlalchemy(conn, sql),
        cursor.copy(sql) as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _next_ids(conn: Connection, table: Table, n: int) -> list[int]:
    """n new ids from the sequence of the table's serial `id` (PostgreSQL)."""
    with closing(conn.connection.cursor()) as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            (table.name, n),
        )
        return [i for (i,) in cursor.fetchall()]


@lru_cache(maxsize=16)
def _insert_into(table: Table) -> Insert:
    """The one INSERT of a table `insert_returning` plans: `_plan` caches by statement, and a
    new statement a call was compiled anew (a millisecond, at a transaction an iteration)."""
    return insert(table)


def _run(conn: Connection, plan: tuple[str, Callable[[Any], Sequence[Any]]], rows: Any) -> None:
    sql, values = plan
    # The driver's own cursor: SQLAlchemy would still look at every row's parameters.
    with closing(conn.connection.cursor()) as cursor, _raised_as_sqlalchemy(conn, sql):
        cursor.executemany(sql, rows if values is _same else [values(r) for r in rows])


@lru_cache(maxsize=64)
def _plan(
    stmt: UpdateBase,
    keys: tuple[str, ...],
    dialect: Dialect,
    positional: bool,
    floats_exact: bool = False,
) -> tuple[str, Callable[[Any], Sequence[Any]]] | None:
    """(positional SQL, row -> its values in the SQL's order), or None when SQLAlchemy must
    fill a value in; rows are dicts, or with `positional` sequences in `keys`' order."""
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
    assert isinstance(compiled, SQLCompiler)
    order = compiled.positiontup
    if order is None or any(name not in keys for name in order):
        return None  # a default SQLAlchemy fills in, or a named style
    # Each value the driver cannot take as it is, converted as SQLAlchemy's type would: floats
    # made floats here (numpy scalars reach the store), others by the type's own processor.
    floats: list[int] = []
    others: list[tuple[int, Callable[[Any], Any]]] = []
    for name, process in compiled._bind_processors.items():
        kind = compiled.binds[name].type
        at = [i for i, n in enumerate(order) if n == name]
        if isinstance(kind, _FLOATS):
            if not floats_exact:
                floats.extend(at)
        elif not isinstance(kind, _NATIVE):
            others.extend((i, cast(Callable[[Any], Any], process)) for i in at)
    getter = itemgetter(*(keys.index(n) for n in order) if positional else order)
    if not floats and not others:
        if len(order) == 1:
            return compiled.string, lambda row: (getter(row),)
        return compiled.string, _same if positional and list(order) == list(keys) else getter

    # Each position's last value and what it became: the rows of one write share values
    # such as its timestamp, and formatting a datetime cost more than the rest of a row.
    # One tuple a slot, replaced whole, so threads sharing the plan never see half of one.
    last: list[tuple[Any, Any]] = [(_NOTHING, None)] * len(order)

    def values(row: Any) -> Sequence[Any]:
        out = list(getter(row)) if len(order) > 1 else [getter(row)]
        for i in floats:
            v = out[i]
            if v is not None and type(v) is not float:
                out[i] = float(v)
        for i, process in others:
            v = out[i]
            seen = last[i]
            if seen[0] is not v:
                seen = last[i] = (v, process(v))
            out[i] = seen[1]
        return out

    return compiled.string, values


_NOTHING = object()


def _same(row: Sequence[Any]) -> Sequence[Any]:
    return row
