"""Imports into a real SQLite store, in this process (the CLI's own tests start it)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.importers.detect import format_of
from app.importers.follow import follow
from app.importers.importer import FileResult, Importer, ImportOptions
from storage.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'store.db'}")
    yield st
    st.close()


def run_import(
    store: Store,
    path: Path,
    name: str = "imported",
    fmt: str = "auto",
    on_note: Callable[[str], None] = lambda _: None,
    **options: Any,
) -> tuple[int, list[FileResult]]:
    """Import `path` as `rollscope import` does; (run id, what each file gave)."""
    settings = ImportOptions(path=path, name=name, **options)
    importer = Importer(store, format_of(path, fmt), settings, on_note=on_note)
    run_id = importer.open()
    try:
        results = [importer.import_file(f) for f in importer.files()]
    except BaseException as exc:
        importer.finish("failed", str(exc))
        raise
    importer.finish("completed")
    return run_id, results


def rows(store: Store, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Plain SQL on the store's file, as a person reads it with sqlite3."""
    assert store.url.startswith("sqlite:///")
    with closing(sqlite3.connect(store.url.removeprefix("sqlite:///"))) as conn:
        return conn.execute(sql, params).fetchall()


@contextmanager
def following(
    importer: Importer,
    on_file: Callable[[FileResult], None],
    on_note: Callable[[str], None] = print,
    **options: Any,
) -> Iterator[None]:
    """`follow` on a thread (a poll of 0.05 s unless `options` say otherwise) for the block's
    length, stopped and joined at its end."""
    stop = threading.Event()
    kwargs = {"on_file": on_file, "on_note": on_note, "poll": 0.05, "stop": stop, **options}
    thread = threading.Thread(target=follow, args=(importer,), kwargs=kwargs)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
