"""A store's files: its journal mode, snapshots of its folder, copies, and its schema taken to
another revision (for the reader and migration tests; `tests.support.stores` fills stores)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

import storage.migrations


def to_rollback_journal(path: Path) -> None:
    """Switch a closed SQLite store from WAL to a rollback journal (as one shipped may be)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    assert wal_header(path) is False


def wal_header(path: Path) -> bool:
    """Whether the file's header says WAL (bytes 18 and 19 are 2; 1 for a rollback journal)."""
    return path.read_bytes()[18] == 2


def files_beside(path: Path) -> dict[str, str]:
    """Every file in the store's folder with the SHA-256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if p.is_file()
    }


def copy_store(path: Path, target: Path) -> Path:
    """A copy of a closed store in another folder."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target / path.name)
    return target / path.name


def add_revision(folder: Path, revision: str = "9001") -> Config:
    """This code's migrations plus one more revision, as a newer rollscope would ship them."""
    here = Path(storage.migrations.__file__).parent
    shutil.copytree(here, folder, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    head = storage.migrations.head_revision()
    (folder / "versions" / f"{revision}_next.py").write_text(
        f'"""A revision after this code\'s head, for the migrate tests."""\n\n'
        "import sqlalchemy as sa\nfrom alembic import op\n\n"
        f'revision = "{revision}"\ndown_revision = "{head}"\n'
        "branch_labels = None\ndepends_on = None\n\n\n"
        "def upgrade() -> None:\n"
        '    op.create_table("next_feature", sa.Column("id", sa.Integer(), primary_key=True))\n'
    )
    cfg = Config()
    cfg.set_main_option("script_location", str(folder))
    return cfg


def upgrade_only_to(url: str, cfg: Config, revision: str) -> None:
    """Create a store at an older revision: run the migrations only up to `revision`."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        cfg.attributes.pop("connection", None)
        engine.dispose()


def downgrade_to(url: str, revision: str) -> None:
    """Take a store down to an older revision (the migrations' downgrade steps)."""
    engine = create_engine(url)
    cfg = storage.migrations.alembic_config()
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
    finally:
        engine.dispose()
