"""Untrusted SQL through the environment's QUERY action: refused, on time, nothing changed."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rollout_core.actions import SQLAction
from rollout_core.datasets import load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.records import ActionKind
from rollout_core.sandbox import SandboxLimits
from rollout_core.settings import EnvironmentSettings
from tests.robustness.helpers import DbCopy, reset_peak_rss, rss_kb, sha256
from tests.robustness.hostile_sql import BENIGN, CAPPED, HOSTILE, ODD_BUT_VALID

DEADLINE = 0.5
ACTION_TABLE_KINDS: tuple[ActionKind, ...] = ("DESCRIBE", "SAMPLE")
LIMITS = SandboxLimits(deadline_seconds=DEADLINE)
SETTINGS = EnvironmentSettings(step_budget=100_000, sandbox=LIMITS)
# Time over the deadline a busy 2-core machine may add (scheduling, the last VM steps, fetch).
SLACK_SECONDS = 1.0
RSS_GROWTH_KB = 300 * 1024


@dataclass
class Ledger:
    """What the corpus did, summed over the module's tests."""

    tried: int = 0
    refused: int = 0
    capped: int = 0
    worst_over: float = float("-inf")
    worst_sql: str = ""
    worst_growth_kb: int = 0
    slow: list[str] = field(default_factory=list)

    def time(self, sql: str, elapsed: float) -> None:
        over = elapsed - DEADLINE
        if over > self.worst_over:
            self.worst_over, self.worst_sql = over, sql[:60]
        if over > SLACK_SECONDS:
            self.slow.append(f"{elapsed:.2f} s: {sql[:80]!r}")


@pytest.fixture(scope="module")
def ledger() -> Iterator[Ledger]:
    book = Ledger()
    yield book
    print(
        f"\nhostile SQL: {book.refused}/{book.tried} refused, {book.capped} capped statements "
        f"bounded; worst time over the {DEADLINE} s deadline {book.worst_over:+.3f} s "
        f"({book.worst_sql!r}); worst RSS growth {book.worst_growth_kb / 1024:.0f} MiB"
    )


@dataclass
class Sandboxed:
    """An environment on a private database copy, with the files to watch around it."""

    env: SQLEnvironment
    copy: DbCopy
    watched: list[Path]


@pytest.fixture()
def sandboxed(
    db_copy: DbCopy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Sandboxed]:
    """A fresh environment; asserts afterwards that the database and watched folders held."""
    cwd, sqlite_tmp = tmp_path / "cwd", tmp_path / "sqlite-tmp"
    cwd.mkdir()
    sqlite_tmp.mkdir()
    monkeypatch.chdir(cwd)  # relative ATTACH/VACUUM INTO targets would land here
    monkeypatch.setenv("SQLITE_TMPDIR", str(sqlite_tmp))  # SQLite's spill files go here
    watched = [db_copy.db_file.parent, cwd, sqlite_tmp, Path(tempfile.gettempdir())]
    before_files = {w: _names(w) for w in watched}
    before_hash = sha256(db_copy.db_file)
    # A fresh environment opens its own connections, under this test's SQLITE_TMPDIR.
    env = SQLEnvironment(dataset=load_dataset(db_copy.questions, db_copy.db_dir), settings=SETTINGS)
    env.reset(question_id="q0")
    yield Sandboxed(env, db_copy, watched)
    env.close()
    assert sha256(db_copy.db_file) == before_hash, "the database file changed"
    for folder in watched:
        # The system temp dir is shared with other processes: only names containing ours count.
        new = _names(folder) - before_files[folder]
        if folder == Path(tempfile.gettempdir()):
            new = {n for n in new if n.startswith(("rollscope-", "etilqs", "evil", "copy"))}
        assert not new, f"new files in {folder}: {sorted(new)[:5]}"


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _step(env: SQLEnvironment, sql: str) -> tuple[str | None, str, float]:
    t0 = time.monotonic()
    obs = env.step(SQLAction("QUERY", sql))
    return obs.error, obs.result, time.monotonic() - t0


@pytest.mark.parametrize("category", sorted(HOSTILE))
def test_hostile_statements_are_refused_on_time(
    category: str, sandboxed: Sandboxed, ledger: Ledger
) -> None:
    reset_peak_rss()
    rss_before, _ = rss_kb()
    accepted = []
    for sql in HOSTILE[category]:
        error, result, elapsed = _step(sandboxed.env, sql)
        ledger.tried += 1
        ledger.time(sql, elapsed)
        if error is None:
            accepted.append(f"{sql[:80]!r} -> {result[:80]!r}")
        else:
            ledger.refused += 1
            assert error.strip() and "\x00" not in error and len(error) < 2_000, error[:200]
    growth = rss_kb()[1] - rss_before
    ledger.worst_growth_kb = max(ledger.worst_growth_kb, growth)
    assert not accepted, f"{category}: not refused:\n" + "\n".join(accepted)
    assert not ledger.slow, "over the deadline:\n" + "\n".join(ledger.slow)
    assert growth < RSS_GROWTH_KB, f"{category}: peak RSS grew by {growth / 1024:.0f} MiB"


def test_capped_work_is_bounded_in_time_and_memory(sandboxed: Sandboxed, ledger: Ledger) -> None:
    reset_peak_rss()
    rss_before, _ = rss_kb()
    for sql in CAPPED:
        error, result, elapsed = _step(sandboxed.env, sql)
        ledger.capped += 1
        ledger.time(sql, elapsed)
        if error is None:
            assert len(result) < 20_000, f"{sql[:60]!r}: observation of {len(result)} chars"
    growth = rss_kb()[1] - rss_before
    ledger.worst_growth_kb = max(ledger.worst_growth_kb, growth)
    assert not ledger.slow, "over the deadline:\n" + "\n".join(ledger.slow)
    assert growth < RSS_GROWTH_KB, f"peak RSS grew by {growth / 1024:.0f} MiB"


def test_unbounded_series_is_truncated_not_refused(sandboxed: Sandboxed) -> None:
    error, result, _ = _step(sandboxed.env, CAPPED[0])
    assert error is None
    assert result.splitlines()[-1].startswith("... more than")


@pytest.mark.parametrize(("sql", "expected"), ODD_BUT_VALID)
def test_odd_text_comes_back_as_text(sandboxed: Sandboxed, sql: str, expected: str | None) -> None:
    error, result, _ = _step(sandboxed.env, sql)
    assert error is None, error
    assert expected is None or expected in result, result
    assert "\x00" not in result and "\x1b" not in result  # escaped as \x00, \x1b
    result.encode("utf-8")  # no lone surrogates reach the store


def test_invalid_utf8_stored_in_the_database_reads_back(db_copy: DbCopy, tmp_path: Path) -> None:
    """Spider holds a few non-UTF-8 strings: reading them must never fail or crash."""
    import sqlite3

    conn = sqlite3.connect(db_copy.db_file)
    conn.execute("CREATE TABLE odd (id INTEGER, t TEXT)")
    conn.execute("INSERT INTO odd VALUES (1, CAST(x'4361666580ff' AS TEXT)), (2, char(0, 7, 27))")
    conn.commit()
    conn.close()
    env = SQLEnvironment(
        dataset=load_dataset(db_copy.questions, db_copy.db_dir),
        settings=EnvironmentSettings(step_budget=10, sandbox=LIMITS),
    )
    env.reset(question_id="q0")
    for action in (SQLAction("QUERY", "SELECT * FROM odd"), SQLAction("SAMPLE", "odd")):
        obs = env.step(action)
        assert obs.error is None and "Caf" in obs.result and "\ufffd" in obs.result
        assert "\\x00\\x07\\x1b" in obs.result
    # The guarded replace cannot take non-UTF-8 text from Python: a clear error, no crash.
    obs = env.step(SQLAction("QUERY", "SELECT replace(t, 'x', 'y') FROM odd"))
    assert obs.error is not None and "valid UTF-8" in obs.error
    obs = env.step(SQLAction("QUERY", "SELECT replace(CAST(t AS BLOB), 'x', 'y') FROM odd"))
    assert obs.error is None and "Caf" in obs.result
    env.close()


def test_benign_queries_keep_working(sandboxed: Sandboxed) -> None:
    failed = []
    for sql in BENIGN:
        error, result, _ = _step(sandboxed.env, sql)
        if error is not None or not result:
            failed.append(f"{sql[:70]!r}: {error}")
    assert not failed, "\n".join(failed)
    _, result, _ = _step(sandboxed.env, "SELECT abs(-1), round(2.5), nullif(1, 1), typeof(1.5)")
    assert result.splitlines()[1] == "1 | 3.0 | NULL | real"


def test_guarded_functions_match_sqlite(sandboxed: Sandboxed) -> None:
    """The replacements for printf, instr, replace and trim give SQLite's own results."""
    env = sandboxed.env
    cases = {
        "SELECT printf('%5.2f|%d|%s|%x|%%', 3.14159, 42, 'x', 255)": " 3.14|42|x|ff|%",
        "SELECT format('%-4s|%04d', 'a', 7), printf('%.3s', 'abcdef')": "a   |0007 | abc",
        "SELECT instr('banana', 'nan'), instr(x'0102', x'02'), instr('a', NULL)": "3 | 2 | NULL",
        "SELECT replace('banana', 'an', 'AN'), replace('abc', '', 'x'), replace(12, 2, 3)": (
            "bANANa | abc | 13"
        ),
        "SELECT trim('xxhixx', 'x'), ltrim('xxhi', 'x'), rtrim('hixx', 'x'), trim(1.50, '0')": (
            "hi | hi | hi | 1.5"
        ),
        # Large calls take the linear path and give the same answers.
        "SELECT instr(printf('%.*c', 900000, 'a') || 'b', printf('%.*c', 100, 'a') || 'b')": (
            "899901"
        ),
        "SELECT length(replace(printf('%.*c', 900000, 'a'), printf('%.*c', 100, 'a'), 'b'))": (
            "9000"
        ),
        "SELECT length(trim(printf('%.*c', 900000, 'a') || 'x', printf('%.*c', 20, 'b') || 'a'))": (
            "1"
        ),
    }
    for sql, expected in cases.items():
        error, result, _ = _step(env, sql)
        assert error is None, f"{sql}: {error}"
        assert result.splitlines()[1] == expected, f"{sql}: {result!r}"


def test_describe_and_sample_with_hostile_names(sandboxed: Sandboxed) -> None:
    env = sandboxed.env
    for name in ("singer; DROP TABLE singer", "sqlite_master", "x' OR '1'='1", "\x00", "a" * 10**5):
        for kind in ACTION_TABLE_KINDS:
            obs = env.step(SQLAction(kind, name))
            assert obs.error is not None and obs.error.startswith("unknown table")
    assert env.step(SQLAction("DESCRIBE", '"singer"')).error is None
