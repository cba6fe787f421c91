"""The SQL sandbox: every refusal, every bomb, and the file left byte-identical."""

from __future__ import annotations

import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_core.sandbox import (
    QueryResult,
    Sandbox,
    SandboxConnection,
    SandboxLimits,
    format_rows,
    open_readonly,
    run_select,
)

FileState = tuple[str, list[str]]
FAST = SandboxLimits(deadline_seconds=0.5)
# Generous: the bound shows the deadline works, not how fast the machine is.
SLACK_SECONDS = 3.0


@pytest.fixture
def conn(db_path: Path) -> Iterator[SandboxConnection]:
    connection = open_readonly(db_path)
    yield connection
    connection.close()


@pytest.fixture
def unchanged(db_path: Path, file_state: Callable[[Path], FileState]) -> Iterator[None]:
    """Assert after the test that the file and its folder are exactly as before."""
    before = file_state(db_path)
    yield
    assert file_state(db_path) == before


REFUSALS = [
    ("INSERT INTO singer VALUES (9, 'X', 1, 1)", "writes are not allowed (INSERT)"),
    ("UPDATE singer SET age = 0", "writes are not allowed (UPDATE)"),
    ("DELETE FROM singer", "writes are not allowed (DELETE)"),
    ("REPLACE INTO singer VALUES (1, 'X', 1, 1)", "writes are not allowed (REPLACE)"),
    ("/* hidden */ delete from singer", "writes are not allowed (DELETE)"),
    ("WITH x AS (SELECT 1) DELETE FROM singer", "writes are not allowed (DELETE)"),
    ("WITH x AS (SELECT 1) INSERT INTO numbers SELECT * FROM x", "writes are not allowed (INSERT)"),
    ("CREATE TABLE t (a)", "schema changes are not allowed (CREATE)"),
    ("CREATE TEMP TABLE t (a)", "schema changes are not allowed (CREATE)"),
    ("CREATE TEMP VIEW v AS SELECT 1", "schema changes are not allowed (CREATE)"),
    ("DROP TABLE singer", "schema changes are not allowed (DROP)"),
    ("ALTER TABLE singer ADD COLUMN x", "schema changes are not allowed (ALTER)"),
    ("ATTACH DATABASE ':memory:' AS other", "not authorized: ATTACH"),
    ("DETACH DATABASE main", "not authorized: DETACH"),
    ("PRAGMA table_info(singer)", "not authorized: PRAGMA"),
    ("PRAGMA writable_schema = 1", "not authorized: PRAGMA"),
    ("PRAGMA journal_mode = WAL", "not authorized: PRAGMA"),
    ("SELECT * FROM pragma_table_info('singer')", "not authorized"),
    ("SELECT load_extension('/tmp/evil.so')", "not authorized: load_extension()"),
    ("BEGIN", "transactions are not allowed (BEGIN)"),
    ("COMMIT", "transactions are not allowed (COMMIT)"),
    ("SAVEPOINT s", "transactions are not allowed (SAVEPOINT)"),
    ("SELECT 1; DROP TABLE singer", "only one statement per QUERY"),
    ("SELECT 1; SELECT 2", "only one statement per QUERY"),
    ("VACUUM", "maintenance commands are not allowed (VACUUM)"),
    ("ANALYZE", "maintenance commands are not allowed (ANALYZE)"),
    ("REINDEX", "maintenance commands are not allowed (REINDEX)"),
    ("EXPLAIN SELECT 1", "only SELECT queries are allowed (got EXPLAIN)"),
]


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(("sql", "message"), REFUSALS)
def test_refusals_name_what_was_refused(conn: SandboxConnection, sql: str, message: str) -> None:
    result = run_select(conn, sql)
    assert result.error is not None and message in result.error
    assert (result.columns, result.rows, result.truncated) == ([], [], False)
    # The connection keeps working after a refusal.
    assert run_select(conn, "SELECT count(*) FROM singer").rows == [(4,)]


@pytest.mark.usefixtures("unchanged")
def test_vacuum_into_creates_no_file(conn: SandboxConnection, tmp_path: Path) -> None:
    target = tmp_path / "copy.sqlite"
    result = run_select(conn, f"VACUUM INTO '{target}'")
    assert result.error is not None and "VACUUM" in result.error
    assert not target.exists()


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "sql",
    [
        "VACUUM INTO '{target}'",
        "ATTACH DATABASE '{target}' AS other",
        "INSERT INTO numbers VALUES (1000)",
        "CREATE TEMP TABLE t (a)",
        "PRAGMA writable_schema = 1",
        "BEGIN IMMEDIATE",
    ],
)
def test_authorizer_refuses_even_without_the_text_check(
    conn: SandboxConnection, tmp_path: Path, sql: str
) -> None:
    """The keyword check is for messages; the authorizer and limits are the real guard."""
    target = tmp_path / "copy.sqlite"
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute(sql.format(target=target))
    assert not target.exists()


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
            "SELECT count(*) FROM r",
            "deadline",
        ),
        (
            "SELECT count(*) FROM numbers a, numbers b, numbers c, numbers d, numbers e "
            "WHERE a.n + b.n + c.n + d.n + e.n >= 0",
            "deadline",
        ),
        (
            "SELECT count(*) FROM (SELECT * FROM numbers a, numbers b, numbers c, numbers d "
            "ORDER BY random())",
            "deadline",
        ),
    ],
    ids=["recursive-cte", "cartesian-count", "cartesian-sort"],
)
def test_runaway_queries_hit_the_deadline(conn: SandboxConnection, sql: str, message: str) -> None:
    result = run_select(conn, sql, FAST)
    assert result.error == "query exceeded the 0.5 s deadline"
    assert result.elapsed_seconds < FAST.deadline_seconds + SLACK_SECONDS


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT zeroblob(1000000000)",
        "SELECT randomblob(1000000000)",
        "SELECT length(randomblob(2000000))",
        "SELECT replace(hex(zeroblob(400000)), '0', '00')",
        # 10,000 rows of 201 characters: 2 MB, refused when the aggregate ends.
        "SELECT group_concat(a.n || printf('%.*c', 200, 'x')) FROM numbers a, numbers b",
        "SELECT printf('%.*c', 1000000000, 'x') IS NOT NULL AND 0",
        "SELECT substr(printf('%0*d', 2000000, 1), 1, 5)",
    ],
)
def test_memory_bombs_are_capped(conn: SandboxConnection, sql: str) -> None:
    result = run_select(conn, sql, FAST)
    assert result.elapsed_seconds < FAST.deadline_seconds + SLACK_SECONDS
    if result.error is None:  # SQLite's printf gives NULL rather than an oversized string
        assert all(cell in (None, 0) for row in result.rows for cell in row)
    else:
        assert "exceeds 1,000,000 bytes" in result.error


@pytest.mark.usefixtures("unchanged")
def test_total_result_size_is_capped(conn: SandboxConnection) -> None:
    limits = SandboxLimits(max_result_bytes=2_000_000)
    result = run_select(conn, "SELECT randomblob(500000) FROM numbers", limits)
    assert result.error is not None and "result exceeds 2,000,000 bytes" in result.error


@pytest.mark.usefixtures("unchanged")
def test_cartesian_rows_stop_at_fetch_rows(conn: SandboxConnection) -> None:
    result = run_select(
        conn,
        "SELECT * FROM numbers a, numbers b, numbers c, numbers d",
        SandboxLimits(fetch_rows=500),
    )
    assert result.error is None
    assert len(result.rows) == 500 and result.truncated


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT ';'", [(";",)]),
        ("SELECT 'a;b' AS x;", [("a;b",)]),
        ("SELECT 1;;  ", [(1,)]),
        ("SELECT 1; -- done", [(1,)]),
        ("  -- leading comment\nSELECT 2", [(2,)]),
        ("VALUES (1), (2)", [(1,), (2,)]),
        ("WITH t(x) AS (SELECT 3) SELECT x FROM t", [(3,)]),
        (
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 3) "
            "SELECT x FROM r",
            [(1,), (2,), (3,)],
        ),
        ("SELECT name FROM adult_singers ORDER BY name", [("Joe",), ("Rose",), ("Tim",)]),
        ("select count(*) from SINGER where AGE > 30", [(3,)]),
        ("SELECT json_extract('{\"a\": 2}', '$.a')", [(2,)]),
        ("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [(5,)]),
        ('SELECT v FROM "Odd ""Name""" ORDER BY v', [(1.5,), (2.25,)]),
    ],
)
def test_benign_queries_work(conn: SandboxConnection, sql: str, rows: list[tuple[object]]) -> None:
    result = run_select(conn, sql)
    assert result.error is None
    assert result.rows == rows


def test_columns_rows_and_no_cell_truncation(conn: SandboxConnection) -> None:
    result = run_select(conn, "SELECT id, note AS text, data FROM misc ORDER BY id")
    assert result.columns == ["id", "text", "data"]
    assert result.rows[0] == (1, "x\ny", b"\x00\xff\x10")
    assert result.rows[1][1] == "\ufffdA\ufffd"  # invalid UTF-8 decoded with replacement
    assert result.rows[2][1] == "long " * 100
    assert not result.truncated and result.elapsed_seconds >= 0


@pytest.mark.parametrize(("fetch", "truncated"), [(10, True), (99, True), (100, False)])
def test_fetch_rows_and_truncated(conn: SandboxConnection, fetch: int, truncated: bool) -> None:
    result = run_select(conn, "SELECT n FROM numbers", SandboxLimits(fetch_rows=fetch))
    assert len(result.rows) == min(fetch, 100)
    assert result.truncated is truncated


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT '\x00'", "NUL character"),
        ("SELECT '\ud800'", "not valid Unicode"),
        ("", "empty query"),
        ("   \n ", "empty query"),
        ("-- only a comment", "empty query"),
        ("SELECT * FROM nowhere", "no such table: nowhere"),
        ("SELEC 1", "only SELECT queries are allowed (got SELEC)"),
        ("SELECT FROM singer", "syntax error"),
        ("SELECT ?", "bindings"),
        ("x" * 20_001, "the limit is 20000"),
    ],
)
def test_bad_text_gives_an_error_result(conn: SandboxConnection, sql: str, message: str) -> None:
    result = run_select(conn, sql)
    assert result.error is not None and message in result.error


def test_non_text_sql_gives_an_error_result(conn: SandboxConnection) -> None:
    assert run_select(conn, None).error == "refused: the query must be text"  # type: ignore[arg-type]


def test_run_select_needs_a_sandbox_connection() -> None:
    with pytest.raises(TypeError, match="open_readonly"):
        run_select(sqlite3.connect(":memory:"), "SELECT 1")


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=200))
def test_any_text_never_raises(conn: SandboxConnection, sql: str) -> None:
    result = run_select(conn, sql, FAST)
    assert isinstance(result, QueryResult)
    assert (result.error is None) == bool(result.columns)


def test_open_readonly_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="database file not found"):
        open_readonly(tmp_path / "absent.sqlite")
    assert list(tmp_path.iterdir()) == []


def test_rollback_journal_file_gets_no_side_files(
    db_path: Path, file_state: Callable[[Path], FileState]
) -> None:
    before = file_state(db_path)
    connection = open_readonly(db_path)
    run_select(connection, "SELECT * FROM singer")
    assert file_state(db_path) == before
    connection.close()
    assert file_state(db_path) == before


def test_wal_file_is_read_without_creating_side_files(
    tmp_path: Path, file_state: Callable[[Path], FileState]
) -> None:
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("CREATE TABLE t (a)")
    writer.execute("INSERT INTO t VALUES (7)")
    writer.commit()
    writer.close()  # the last connection checkpoints and removes -wal/-shm
    before = file_state(path)
    assert before[1] == ["wal.sqlite"]
    connection = open_readonly(path)
    assert run_select(connection, "SELECT a FROM t").rows == [(7,)]
    connection.close()
    assert file_state(path) == before


def test_limits_are_applied(conn: SandboxConnection) -> None:
    assert conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == 1_000_000
    assert conn.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED) == 0
    assert conn.getlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH) == 100
    result = run_select(conn, "SELECT " + "1 + " * 150 + "1")
    assert result.error is not None and "maximum depth 100" in result.error


def _result(rows: list[tuple[object, ...]], truncated: bool = False) -> QueryResult:
    return QueryResult(["a", "b"], rows, truncated, None, 0.0)


def test_format_rows_table() -> None:
    text = format_rows(_result([(1, "x"), (None, 2.5)]))
    assert text == "a | b\n1 | x\nNULL | 2.5"


def test_format_rows_caps_rows_and_cells() -> None:
    limits = SandboxLimits(max_rows=2, max_cell_chars=5)
    rows: list[tuple[object, ...]] = [("abcdefgh", i) for i in range(5)]
    assert format_rows(_result(rows), limits) == (
        "a | b\nabcde... | 0\nabcde... | 1\n... 3 more rows"
    )
    assert format_rows(_result(rows, truncated=True), limits).endswith("... more than 3 more rows")


def test_format_rows_special_cells() -> None:
    text = format_rows(_result([("line1\nline2", b"\x01\x02"), ("z", b"\x00" * 500)]))
    assert text.splitlines() == ["a | b", "line1\\nline2 | x'0102'", "z | <500 bytes>"]


def test_format_rows_empty_and_error() -> None:
    assert format_rows(_result([])) == "a | b\n(no rows)"
    assert format_rows(QueryResult([], [], False, None, 0.0)) == "(no rows)"
    error = QueryResult([], [], False, "only one statement per QUERY", 0.0)
    assert format_rows(error) == "Error: only one statement per QUERY"


def test_path_with_space_hash_and_question_mark(
    tmp_path: Path, file_state: Callable[[Path], FileState]
) -> None:
    folder = tmp_path / "my db #1?x=y"
    folder.mkdir()
    path = folder / "a b.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("CREATE TABLE t (a)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    writer.close()
    before = file_state(path)
    connection = open_readonly(path)
    assert run_select(connection, "SELECT a FROM t").rows == [(1,)]
    assert run_select(connection, "INSERT INTO t VALUES (2)").error is not None
    connection.close()
    assert file_state(path) == before


def test_sandbox_pools_connections_per_file(db_path: Path, tmp_path: Path) -> None:
    other_path = tmp_path / "other.sqlite"
    writer = sqlite3.connect(other_path)
    writer.execute("CREATE TABLE t (a)")
    writer.commit()
    writer.close()
    with Sandbox(FAST) as sandbox:
        # Lent to one caller at a time: a second, concurrent caller gets its own.
        with sandbox.connection(db_path) as first, sandbox.connection(str(db_path)) as second:
            assert second is not first
        with sandbox.connection(db_path) as again:
            assert again in (first, second)
        with sandbox.connection(other_path) as other:
            assert other not in (first, second)
            assert other.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == FAST.max_value_bytes
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        first.execute("SELECT 1")
    with pytest.raises(RuntimeError, match="closed"), sandbox.connection(db_path):
        pass


def test_sandbox_opens_connections_with_its_limits(db_path: Path) -> None:
    limits = SandboxLimits(max_value_bytes=5_000, max_expr_depth=20)
    with Sandbox(limits) as sandbox, sandbox.connection(db_path) as conn:
        assert conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == 5_000
        assert conn.getlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH) == 20
        error = sandbox.run_select(db_path, "SELECT hex(zeroblob(3000))").error
    assert error is not None and "exceeds 5,000 bytes" in error


def test_connection_lent_at_close_is_closed_on_return(db_path: Path) -> None:
    sandbox = Sandbox()
    with sandbox.connection(db_path) as conn:
        sandbox.close()
        assert run_select(conn, "SELECT count(*) FROM singer").rows == [(4,)]
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")


def test_idle_connections_beyond_the_cap_are_closed(db_path: Path) -> None:
    with Sandbox(max_idle=1) as sandbox:
        with sandbox.connection(db_path) as first, sandbox.connection(db_path) as second:
            pass  # `second` comes back first, then `first` pushes it out
        with sandbox.connection(db_path) as kept:
            assert kept is first
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            second.execute("SELECT 1")


def test_threads_share_a_sandbox(db_path: Path) -> None:
    """Each thread gets a connection of its own; the guarded functions work on any thread."""
    errors: list[str] = []

    def work() -> None:
        for _ in range(20):
            result = sandbox.run_select(db_path, "SELECT printf('%03d', count(*)) FROM singer")
            if result.rows != [("004",)]:
                errors.append(str(result.error))

    with Sandbox() as sandbox:
        sandbox.run_select(db_path, "SELECT 1")  # a connection opened on this thread first
        workers = [threading.Thread(target=work) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert not errors, errors[:3]


def test_cached_select_runs_once_and_keeps_no_errors(db_path: Path) -> None:
    with Sandbox() as sandbox:
        first = sandbox.run_select_cached(db_path, "SELECT random()", sandbox.limits)
        assert sandbox.run_select_cached(db_path, "SELECT random()", sandbox.limits) is first
        other = sandbox.run_select_cached(db_path, "SELECT random()", FAST)
        assert other is not first  # other limits, another entry
        failed = sandbox.run_select_cached(db_path, "SELECT * FROM nowhere", sandbox.limits)
        again = sandbox.run_select_cached(db_path, "SELECT * FROM nowhere", sandbox.limits)
        assert failed.error is not None and again is not failed


def test_a_stop_signal_during_a_query_stops_the_job_not_the_query(db_path: Path) -> None:
    """A second Ctrl-C raises KeyboardInterrupt where it lands; during a long statement that
    is SQLite's progress handler, which turned it into the query's error "interrupted": the
    step was recorded as failed and the job went on."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")

    def second_ctrl_c(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    )
    previous = signal.signal(signal.SIGALRM, second_ctrl_c)
    try:
        with Sandbox(SandboxLimits(deadline_seconds=30)) as sandbox:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                sandbox.run_select(db_path, endless)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
