"""The bundled demo benchmark: builds its SQLite databases from the shipped SQL, once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

DEMO_DATASET_NAME = "demo"
DEMO_VERSION = "demo-benchmark-v1"
QUESTIONS_FILE = "questions.json"
MANIFEST_FILE = "manifest.json"
# Fixed so the built bytes do not depend on a build's compile-time default.
_PAGE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where a built demo benchmark lives, in the Spider layout."""

    root: Path
    questions_path: Path
    """`<root>/questions.json`."""
    db_dir: Path
    """`<root>/database`, holding `<db_id>/<db_id>.sqlite`."""

    def db_path(self, db_id: str) -> Path:
        """Path of one demo database file."""
        return self.db_dir / db_id / f"{db_id}.sqlite"


def default_demo_dir() -> Path:
    """`$ROLLSCOPE_HOME/demo-benchmark-v1`, else `~/.cache/rollscope/demo-benchmark-v1`."""
    home = os.environ.get("ROLLSCOPE_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cache" / "rollscope"
    return base / DEMO_VERSION


def demo_sources() -> dict[str, bytes]:
    """The shipped files the build reads: `<db_id>.sql` for each database and questions.json."""
    data = resources.files("rollout_core") / "demo_data"
    names = sorted(
        entry.name
        for entry in data.iterdir()
        if entry.name.endswith(".sql") or entry.name == QUESTIONS_FILE
    )
    return {name: (data / name).read_bytes() for name in names}


def demo_db_ids() -> list[str]:
    """Names of the demo databases, sorted."""
    return [name.removesuffix(".sql") for name in demo_sources() if name.endswith(".sql")]


def build_demo_benchmark(target: Path | None = None) -> DemoPaths:
    """Build the demo benchmark under `target` (atomically), or reuse a complete earlier build."""
    root = Path(target).expanduser() if target is not None else default_demo_dir()
    root = root.resolve()
    sources = demo_sources()
    if _is_complete(root, sources):
        return _paths(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.building-", dir=root.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the build is meant to be shared
    try:
        _build_into(staging, sources)
        # A concurrent builder may have finished meanwhile: keep its build, drop ours.
        if not _is_complete(root, sources):
            _move_into_place(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _is_complete(root, sources):
        raise RuntimeError(f"demo benchmark at {root} is incomplete after building; delete it")
    return _paths(root)


def _paths(root: Path) -> DemoPaths:
    return DemoPaths(root=root, questions_path=root / QUESTIONS_FILE, db_dir=root / "database")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _build_into(staging: Path, sources: dict[str, bytes]) -> None:
    """Write databases, questions and, last of all, the manifest into `staging`."""
    paths = _paths(staging)
    built: dict[str, str] = {}
    for name, sql in sources.items():
        if not name.endswith(".sql"):
            continue
        db_id = name.removesuffix(".sql")
        db_path = paths.db_path(db_id)
        db_path.parent.mkdir(parents=True)
        _build_database(db_path, sql.decode("utf-8"))
        built[db_id] = _sha256(db_path.read_bytes())
    paths.questions_path.write_bytes(sources[QUESTIONS_FILE])
    manifest = {
        "version": DEMO_VERSION,
        "sqlite_version": sqlite3.sqlite_version,
        "sources": {name: _sha256(data) for name, data in sources.items()},
        "databases": built,
    }
    (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _build_database(db_path: Path, sql: str) -> None:
    """Run one schema+data script into a fresh file, in rollback-journal mode, then close it."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.executescript(f"BEGIN;\n{sql}\nCOMMIT;")
        conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()
    # Read-only on disk as a guard: episodes read these files and must never change them.
    db_path.chmod(0o444)


def _move_into_place(staging: Path, root: Path) -> None:
    """Swap the finished build in for `root`; a concurrent builder that won the race is kept."""
    old: Path | None = None
    if root.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
        os.replace(root, old / root.name)
    try:
        os.replace(staging, root)
    except OSError:
        # Another process renamed its own complete build into place first.
        if not root.exists():
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _is_complete(root: Path, sources: dict[str, bytes]) -> bool:
    """True when `root` holds a build of exactly these sources whose files are unchanged."""
    try:
        manifest = json.loads((root / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return False
    expected = {name: _sha256(data) for name, data in sources.items()}
    if not isinstance(manifest, dict) or manifest.get("sources") != expected:
        return False
    paths = _paths(root)
    databases = manifest.get("databases")
    db_ids = [name.removesuffix(".sql") for name in sources if name.endswith(".sql")]
    if not isinstance(databases, dict) or sorted(databases) != sorted(db_ids):
        return False
    try:
        if paths.questions_path.read_bytes() != sources[QUESTIONS_FILE]:
            return False
        return all(
            _sha256(paths.db_path(db_id).read_bytes()) == databases[db_id] for db_id in db_ids
        )
    except OSError:
        return False
