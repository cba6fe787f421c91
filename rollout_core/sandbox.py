"""Run untrusted SQL against a SQLite file without any way to change it or run away.

Layers, each enough on its own for the case it names:
- the file is opened read-only through a `mode=ro` URI and `PRAGMA query_only`;
- an authorizer allows only reads, functions and recursive CTEs (no ATTACH, PRAGMA, writes,
  DDL, transactions, extension loading); `SQLITE_LIMIT_ATTACHED = 0` also blocks VACUUM INTO;
- a statement must start with SELECT, WITH or VALUES, and only one statement runs per call;
- a progress handler enforces a wall-clock deadline; SQLite length limits cap strings, blobs
  and SQL text; the fetch stops at `fetch_rows` rows or `max_result_bytes`;
- memory: values are capped by the length limit and sorts and recursive queues spill to
  SQLite's (unlinked) temp files, but one statement can still hold many values at once (300
  columns of a 1 MB blob hold 590 MB; 520 constant `hex(zeroblob(499000))` 1 GB). SQLite's
  hard heap limit stops those, and it is process-wide, so it is set only while a sandboxed
  statement runs, to the heap in use plus `memory_budget_bytes`, and put back after
  (heap_limit.py): the store's connections in the same process are not capped in between,
  and a write that runs short of heap while one runs waits for it to end and tries again;
- work done inside one VM instruction escapes the deadline's progress handler: printf/format,
  instr, replace and trim are replaced by guarded versions (sql_functions.py).

A `Sandbox` owns one set of limits and a pool of connections opened with them; `close()` (or
leaving its `with` block) closes them. `open_readonly` and `run_select` are the parts it uses.

`immutable=1` is not used for rollback-journal files (Spider, BIRD): it skips locking, so a
file rewritten while open would be read inconsistently, and `mode=ro` on such a file creates
no `-journal`, `-wal` or `-shm`. A WAL-mode file is different: opening it read-only creates
`-wal`/`-shm` beside it. When a WAL file has no `-wal`/`-shm` (nothing pending), it is opened
with `immutable=1`, which reads the same data and creates nothing.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from rollout_core.heap_limit import heap_ceiling
from rollout_core.sql_functions import decode_text, install_guarded_functions
from rollout_core.sql_text import first_keyword

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# Read-only pragmas the trusted schema path may use (schema.py); never the agent's SQL.
_TRUSTED_PRAGMAS = frozenset({"table_info", "table_xinfo", "foreign_key_list", "index_list"})
# Functions that reach outside the database or leak pointers when an extension provides them.
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})

_WRITE_ACTIONS = {
    sqlite3.SQLITE_INSERT: "INSERT",
    sqlite3.SQLITE_UPDATE: "UPDATE",
    sqlite3.SQLITE_DELETE: "DELETE",
}
_TRANSACTION_ACTIONS = {
    sqlite3.SQLITE_TRANSACTION: "transaction",
    sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
}
_NAMED_ACTIONS = {
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_PRAGMA: "PRAGMA",
    sqlite3.SQLITE_ANALYZE: "ANALYZE",
    sqlite3.SQLITE_REINDEX: "REINDEX",
    sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
}

_KEYWORD_GROUPS = (
    ("refused: writes are not allowed ({})", ("INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT")),
    ("refused: schema changes are not allowed ({})", ("CREATE", "DROP", "ALTER")),
    (
        "refused: transactions are not allowed ({})",
        ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"),
    ),
    ("not authorized: {}", ("ATTACH", "DETACH", "PRAGMA")),
    ("refused: maintenance commands are not allowed ({})", ("VACUUM", "ANALYZE", "REINDEX")),
)
_KEYWORD_REFUSALS = {word: text.format(word) for text, words in _KEYWORD_GROUPS for word in words}
# CREATE/DROP action codes by name, e.g. SQLITE_CREATE_TEMP_TABLE -> "CREATE TEMP TABLE".
_SCHEMA_ACTIONS = {
    getattr(sqlite3, name): name.removeprefix("SQLITE_").replace("_", " ")
    for name in dir(sqlite3)
    if name.startswith(("SQLITE_CREATE_", "SQLITE_DROP_"))
}
_STATEMENT_STARTS = frozenset({"SELECT", "WITH", "VALUES"})
# C0 controls but tab, newline and carriage return (escaped as \n, \r where it matters), and DEL.
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SandboxLimits:
    """Caps on one query: time, rows, sizes, memory. Frozen and hashable (it keys result caches)."""

    deadline_seconds: float = 2.0
    """Wall-clock limit of one query, fetch included."""
    max_rows: int = 20
    """Rows shown to the agent by `format_rows`."""
    fetch_rows: int = 10_000
    """Rows fetched at most (for 'N more rows' and for grading)."""
    max_cell_chars: int = 100
    """Characters of one cell shown to the agent."""
    max_sql_chars: int = 20_000
    """Longest SQL text accepted."""
    max_result_bytes: int = 16_000_000
    """Approximate size of all fetched cells together; beyond it the query is refused."""
    max_value_bytes: int = 1_000_000
    """SQLITE_LIMIT_LENGTH: largest string or blob SQLite will build (zeroblob, printf bombs)."""
    max_expr_depth: int = 100
    """SQLITE_LIMIT_EXPR_DEPTH."""
    max_compound_select: int = 50
    """SQLITE_LIMIT_COMPOUND_SELECT: terms of a UNION/INTERSECT/EXCEPT chain."""
    max_function_args: int = 64
    """SQLITE_LIMIT_FUNCTION_ARG."""
    max_like_pattern: int = 1_000
    """SQLITE_LIMIT_LIKE_PATTERN_LENGTH."""
    max_vdbe_ops: int = 100_000
    """SQLITE_LIMIT_VDBE_OP: size of one compiled statement."""
    memory_budget_bytes: int = 128 * 1024 * 1024
    """SQLite heap one statement may allocate while it runs; beyond it the query is refused."""
    progress_ops: int = 1_000
    """VM instructions between two deadline checks."""
    gold_deadline_seconds: float = 30.0
    """Wall-clock limit of a gold query (trusted, but slow on some BIRD databases)."""
    gold_fetch_rows: int = 100_000
    """Rows of a gold result at most: a larger one fails its question instead of grading
    against a part of it."""


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: all fetched rows (cells untruncated), or the error."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool
    """True when more than `fetch_rows` rows existed."""
    error: str | None
    elapsed_seconds: float


class _Guard:
    """Per-connection state shared with the callbacks (kept apart to avoid a reference cycle)."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.timed_out = False
        self.denied: str | None = None
        self.trusted = False

    def reset(self) -> None:
        self.deadline, self.timed_out, self.denied = float("inf"), False, None


class SandboxConnection(sqlite3.Connection):
    """A read-only connection carrying the sandbox's per-query state in `guard`."""

    guard: _Guard


def open_readonly(
    db_path: str | Path, limits: SandboxLimits | None = None, *, check_same_thread: bool = True
) -> SandboxConnection:
    """Open `db_path` read-only with the authorizer, limits and deadline handler installed.

    `check_same_thread=False` lets another thread use the connection; the caller must then
    make sure only one thread uses it at a time (the `Sandbox` pool does).
    """
    limits = limits or SandboxLimits()
    path = Path(db_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {path}; check the db_dir and db_id")
    uri = f"{path.as_uri()}?{'immutable=1' if _needs_immutable(path) else 'mode=ro'}"
    # No statement cache: a statement prepared on the trusted path must never be reused by
    # identical untrusted text without passing the authorizer again.
    conn = sqlite3.connect(
        uri,
        uri=True,
        isolation_level=None,
        factory=SandboxConnection,
        cached_statements=0,
        check_same_thread=check_same_thread,
    )
    assert isinstance(conn, SandboxConnection)
    conn.guard = guard = _Guard()
    conn.text_factory = decode_text
    # Builds without extension support lack the method; there is nothing to switch off then.
    if hasattr(conn, "enable_load_extension"):
        conn.enable_load_extension(False)
    # Pragmas run before the authorizer exists, which would refuse them.
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    # Sorts, DISTINCT and recursive queues spill to temp files rather than grow the heap.
    conn.execute("PRAGMA temp_store = FILE")
    if heap_ceiling() is None:
        # No way to lift a heap limit later: the old process-wide one (see heap_limit.py).
        conn.execute(f"PRAGMA hard_heap_limit = {int(limits.memory_budget_bytes)}")
    _set_limits(conn, limits)
    install_guarded_functions(conn, lambda reason: _deny(guard, reason), limits.max_value_bytes)
    conn.set_authorizer(_authorizer_for(guard))
    conn.set_progress_handler(_progress_handler_for(guard), limits.progress_ops)
    return conn


def _needs_immutable(path: Path) -> bool:
    """True for a WAL-mode file with no -wal/-shm beside it (see the module docstring)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    is_wal = len(header) == 20 and header[18] == 2 and header[19] == 2
    siblings = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    return is_wal and not any(sibling.exists() for sibling in siblings)


def _set_limits(conn: sqlite3.Connection, limits: SandboxLimits) -> None:
    """Apply SQLite's per-connection size limits."""
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(4 * limits.max_sql_chars, 10_000))
    conn.setlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH, limits.max_expr_depth)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, limits.max_compound_select)
    conn.setlimit(sqlite3.SQLITE_LIMIT_FUNCTION_ARG, limits.max_function_args)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, limits.max_like_pattern)
    conn.setlimit(sqlite3.SQLITE_LIMIT_VDBE_OP, limits.max_vdbe_ops)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 16)
    conn.setlimit(sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)


def _authorizer_for(guard: _Guard) -> Any:
    """Build the allow-list authorizer; it records why it refused for a clear message."""

    def authorize(
        action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                return _deny(guard, f"not authorized: {(arg2 or '').lower()}()")
            return sqlite3.SQLITE_OK
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if guard.trusted and action == sqlite3.SQLITE_PRAGMA and arg1 in _TRUSTED_PRAGMAS:
            return sqlite3.SQLITE_OK
        return _deny(guard, _refusal(action, arg1))

    return authorize


def _deny(guard: _Guard, reason: str) -> int:
    if guard.denied is None:
        guard.denied = reason
    return sqlite3.SQLITE_DENY


def _refusal(action: int, arg1: str | None) -> str:
    """Say in words what the authorizer refused."""
    if action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_schema"):
        # SQLite asks this when a table-valued function (json_each, pragma_*) is first set up.
        return "not authorized: table-valued functions and virtual tables"
    if action in _WRITE_ACTIONS:
        return f"refused: writes are not allowed ({_WRITE_ACTIONS[action]})"
    if action in _TRANSACTION_ACTIONS:
        return f"refused: transactions are not allowed ({arg1 or _TRANSACTION_ACTIONS[action]})"
    if action in _NAMED_ACTIONS:
        return f"not authorized: {_NAMED_ACTIONS[action]}"
    if action in _SCHEMA_ACTIONS:
        return f"refused: schema changes are not allowed ({_SCHEMA_ACTIONS[action]})"
    return f"not authorized: operation {action}"


def _progress_handler_for(guard: _Guard) -> Any:
    """Build the handler SQLite calls every `progress_ops` VM steps: non-zero aborts."""

    def check() -> int:
        if time.monotonic() > guard.deadline:
            guard.timed_out = True
            return 1
        return 0

    return check


@contextmanager
def trusted_reads(conn: SandboxConnection) -> Iterator[SandboxConnection]:
    """Let internal code use the read-only schema pragmas; writes stay refused."""
    conn.guard.trusted = True
    try:
        yield conn
    finally:
        conn.guard.trusted = False


def run_select(
    conn: sqlite3.Connection, sql: str, limits: SandboxLimits = SandboxLimits()
) -> QueryResult:
    """Run one untrusted SELECT; every failure comes back as `QueryResult.error`."""
    if not isinstance(conn, SandboxConnection):
        raise TypeError("run_select needs a connection from sandbox.open_readonly()")
    started = time.monotonic()
    try:
        refusal = _precheck(sql, limits)
        if refusal is not None:
            return _failed(refusal, started)
        return _execute(conn, _strip_trailing_semicolons(sql), limits, started)
    except Exception as exc:  # never raise for model-written SQL
        return _failed(f"query failed: {type(exc).__name__}: {exc}", started)
    finally:
        conn.guard.reset()


def _failed(message: str, started: float) -> QueryResult:
    return QueryResult([], [], False, _escape_controls(message), time.monotonic() - started)


def _escape_controls(text: str) -> str:
    """Control characters as `\\xNN`: PostgreSQL text cannot hold NUL, terminals obey ESC."""
    return _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _precheck(sql: str, limits: SandboxLimits) -> str | None:
    """Refuse what can be told from the text alone, with a message saying what."""
    if not isinstance(sql, str):
        return "refused: the query must be text"
    if len(sql) > limits.max_sql_chars:
        return f"refused: query is {len(sql)} characters; the limit is {limits.max_sql_chars}"
    if "\x00" in sql:
        return "refused: the query contains a NUL character"
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:
        return "refused: the query contains characters that are not valid Unicode"
    word = first_keyword(sql)
    if word is None:
        return "empty query: write one SELECT statement"
    if word in _KEYWORD_REFUSALS:
        return _KEYWORD_REFUSALS[word]
    if word not in _STATEMENT_STARTS:
        return f"refused: only SELECT queries are allowed (got {word})"
    return None


def _strip_trailing_semicolons(sql: str) -> str:
    """`SELECT 1;;` is one statement for the agent's purposes."""
    text = sql.rstrip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def _execute(
    conn: SandboxConnection, sql: str, limits: SandboxLimits, started: float
) -> QueryResult:
    """Execute and fetch under the deadline; map SQLite errors to messages."""
    guard = conn.guard
    guard.reset()
    guard.deadline = started + limits.deadline_seconds
    cursor = conn.cursor()
    try:
        # The fetch steps the statement too, so it runs under the ceiling as well.
        with _memory_ceiling(limits):
            cursor.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows, truncated, size_error = _fetch(cursor, limits, guard.deadline)
    except sqlite3.ProgrammingError as exc:
        if "one statement" in str(exc):
            return _failed("only one statement per QUERY", started)
        return _failed(f"query failed: {exc}", started)
    except sqlite3.Error as exc:
        if _stopped_by_a_signal(guard, exc):
            # A second Ctrl-C landed in the progress handler, which SQLite turns into an SQL
            # error: it stops the job, as it does anywhere else, not the agent's query.
            raise KeyboardInterrupt from None
        return _failed(_explain(guard, exc, limits), started)
    except MemoryError:  # SQLITE_NOMEM: the statement reached its memory budget
        return _failed(_memory_message(limits), started)
    finally:
        cursor.close()
    if guard.timed_out or time.monotonic() > guard.deadline:
        return _failed(_deadline_message(limits), started)
    if size_error is not None:
        return _failed(size_error, started)
    if not columns:
        return _failed("refused: only SELECT queries are allowed", started)
    return QueryResult(columns, rows, truncated, None, time.monotonic() - started)


def _fetch(
    cursor: sqlite3.Cursor, limits: SandboxLimits, deadline: float
) -> tuple[list[tuple[Any, ...]], bool, str | None]:
    """Fetch up to `fetch_rows` rows, watching the clock and the total size."""
    rows: list[tuple[Any, ...]] = []
    size = 0
    # Row by row: a batch of 512 rows of 1 MB cells would hold 512 MB before a size check.
    for row in cursor:
        size += sum(len(cell) if isinstance(cell, str | bytes) else 8 for cell in row)
        if size > limits.max_result_bytes:
            return (
                [],
                False,
                (
                    f"refused: result exceeds {limits.max_result_bytes:,} bytes; "
                    "select fewer or shorter columns"
                ),
            )
        rows.append(row)
        if len(rows) > limits.fetch_rows or time.monotonic() > deadline:
            break
    truncated = len(rows) > limits.fetch_rows
    return rows[: limits.fetch_rows], truncated, None


def _stopped_by_a_signal(guard: _Guard, exc: sqlite3.Error) -> bool:
    """Whether the statement was cut by an exception raised in the progress handler (nothing
    else interrupts a sandboxed statement but its deadline): a signal handler's
    KeyboardInterrupt, which SQLite reports as "interrupted" and Python drops."""
    return not guard.timed_out and guard.denied is None and str(exc) == "interrupted"


def _memory_ceiling(limits: SandboxLimits) -> AbstractContextManager[None]:
    """A context in which SQLite may allocate at most the limits' memory budget more."""
    ceiling = heap_ceiling()
    if ceiling is None:  # the permanent limit set at open_readonly applies
        return nullcontext()
    return ceiling.around(limits.memory_budget_bytes)


def _memory_message(limits: SandboxLimits) -> str:
    budget = limits.memory_budget_bytes / 2**20
    return f"refused: the query needs more than {budget:,.0f} MiB of memory; select less at once"


def _deadline_message(limits: SandboxLimits) -> str:
    return f"query exceeded the {limits.deadline_seconds:.1f} s deadline"


def _explain(guard: _Guard, exc: sqlite3.Error, limits: SandboxLimits) -> str:
    """Turn a SQLite error into the message the agent sees."""
    if guard.timed_out:
        return _deadline_message(limits)
    if guard.denied is not None:
        return guard.denied
    text = str(exc)
    if "out of memory" in text:
        return _memory_message(limits)
    if "too big" in text:
        return f"refused: a value exceeds {limits.max_value_bytes:,} bytes ({text})"
    if "readonly" in text or "read-only" in text:
        return f"refused: the database is read-only ({text})"
    if "user-defined function raised exception" in text:
        # Python cannot hand a guarded function text that is not valid UTF-8.
        return (
            "query failed: printf, format, instr, replace and trim need valid UTF-8 text; "
            "CAST the column AS BLOB first"
        )
    return text


def format_rows(result: QueryResult, limits: SandboxLimits = SandboxLimits()) -> str:
    """Render a result for the agent: header, `|`-separated rows, capped and cut."""
    if result.error is not None:
        return f"Error: {result.error}"
    lines = [" | ".join(_cell_text(c, limits.max_cell_chars) for c in result.columns)]
    if not result.rows:
        lines.append("(no rows)")
        return "\n".join(lines) if result.columns else "(no rows)"
    shown = result.rows[: limits.max_rows]
    lines.extend(" | ".join(_cell_text(c, limits.max_cell_chars) for c in row) for row in shown)
    hidden = len(result.rows) - len(shown)
    if result.truncated:
        lines.append(f"... more than {hidden} more rows")
    elif hidden:
        lines.append(f"... {hidden} more rows")
    return "\n".join(lines)


def _cell_text(cell: Any, max_chars: int) -> str:
    """One cell as a single line of text, cut to `max_chars` with a `...` marker."""
    if cell is None:
        text = "NULL"
    elif isinstance(cell, bytes):
        text = f"<{len(cell)} bytes>" if len(cell) > max_chars // 2 else "x'" + cell.hex() + "'"
    elif isinstance(cell, float):
        text = repr(cell)
    else:
        text = str(cell)
    text = _escape_controls(text.replace("\r", "\\r").replace("\n", "\\n"))
    return text if len(text) <= max_chars else text[:max_chars] + "..."


class Sandbox:
    """Read-only connections to database files, all opened with one set of limits.

    Connections are pooled per file. `connection()` lends one to a single caller at a time, so
    several threads may share a sandbox. Closing it closes every connection; one lent at that
    moment is closed when it comes back.
    """

    def __init__(self, limits: SandboxLimits | None = None, *, max_idle: int = 32) -> None:
        """`max_idle`: idle connections kept; the least recently used beyond it are closed."""
        self.limits = limits or SandboxLimits()
        self._max_idle = max_idle
        self._idle: OrderedDict[tuple[Path, int], SandboxConnection] = OrderedDict()
        self._results: dict[tuple[Path, str, SandboxLimits], QueryResult] = {}
        self._resolved: dict[str | Path, Path] = {}
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self, db_path: str | Path) -> Iterator[SandboxConnection]:
        """A connection to `db_path` with this sandbox's limits, for this caller alone."""
        path = self._resolve(db_path)
        conn = self._take_idle(path)
        if conn is None:
            conn = open_readonly(path, self.limits, check_same_thread=False)
        try:
            yield conn
        finally:
            self._give_back(path, conn)

    def run_select(
        self, db_path: str | Path, sql: str, limits: SandboxLimits | None = None
    ) -> QueryResult:
        """Run one untrusted SELECT on `db_path` (`limits` overrides the per-query caps)."""
        with self.connection(db_path) as conn:
            return run_select(conn, sql, limits or self.limits)

    def run_select_cached(
        self, db_path: str | Path, sql: str, limits: SandboxLimits
    ) -> QueryResult:
        """`run_select` once per (file, SQL, limits) while the sandbox lives; errors are not kept.

        For trusted, deterministic queries asked again and again (gold queries). Callers must
        not change the rows they get: the next caller gets the same list.
        """
        key = (self._resolve(db_path), sql, limits)
        with self._lock:
            cached = self._results.get(key)
        if cached is not None:
            return cached
        result = self.run_select(db_path, sql, limits)
        if result.error is None:
            with self._lock:
                self._results[key] = result
        return result

    def close(self) -> None:
        """Close every pooled connection and forget cached results; the sandbox is unusable."""
        with self._lock:
            self._closed = True
            idle = list(self._idle.values())
            self._idle.clear()
            self._results.clear()
        for conn in idle:
            conn.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _resolve(self, db_path: str | Path) -> Path:
        """The file's absolute path, links followed; remembered, since every step of an episode
        asks for the same file and resolving reads each folder of the path."""
        path = self._resolved.get(db_path)
        if path is None:
            path = self._resolved[db_path] = Path(db_path).resolve()
        return path

    def _take_idle(self, path: Path) -> SandboxConnection | None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox is closed; make a new Sandbox")
            key = next((k for k in reversed(self._idle) if k[0] == path), None)
            return None if key is None else self._idle.pop(key)

    def _give_back(self, path: Path, conn: SandboxConnection) -> None:
        evicted: list[SandboxConnection] = []
        with self._lock:
            if self._closed:
                evicted.append(conn)
            else:
                self._idle[(path, id(conn))] = conn
                while len(self._idle) > self._max_idle:
                    evicted.append(self._idle.popitem(last=False)[1])
        for old in evicted:
            old.close()
