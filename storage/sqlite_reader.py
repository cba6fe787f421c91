"""How a reader opens a SQLite store file without writing to it or beside it.

`mode=ro` is the normal way: SQLite takes its usual shared locks, so a reader sees every commit
of a live writer, the dashboard follows a run as it grows, and a reader never blocks a writer
in WAL mode. A WAL store is the exception: a reader needs its `-wal` and `-shm` files, and
creates them when they are missing (an empty `-wal` and a 32 KiB `-shm` index, left behind
because a read-only connection may not delete them). In a folder no one can write (a read-only
mount, a store shipped with a paper) it cannot create them, and `mode=ro` fails with "unable to
open database file" (measured with SQLite 3.40). There `immutable=1` opens the file as a plain
read-only snapshot: no locks, no `-shm`, and the `-wal` ignored. What that gives up: no live
view of a writer, and a wrong or failing read if someone writes the file meanwhile (through
another mount, say), so it is used only where this process cannot write the folder, and only
when no `-wal` holds commits that the snapshot would miss.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

ReadMode = Literal["ro", "immutable"]

_HEADER = b"SQLite format 3\x00"
_WAL_VERSION = 2
"""Bytes 18 and 19 of the header (file format write and read version): 2 = WAL, 1 = rollback."""


class UnreadableStore(Exception):
    """A SQLite file a reader cannot open without writing; the message names the fix."""


class NoStoreFile(UnreadableStore):
    """No store yet: the file is missing or empty."""


def reader_mode(path: Path) -> ReadMode:
    """`ro`, or `immutable` for a WAL store whose folder this process cannot write."""
    if not path.is_file():
        raise NoStoreFile(
            f"no store at {path} (a reader creates nothing): check the path, or create a "
            f"store there with `rollscope migrate --store {path}`"
        )
    if path.stat().st_size == 0:
        raise NoStoreFile(
            f"{path} is an empty file, not a store yet: check the path, or create a store "
            f"there with `rollscope migrate --store {path}`"
        )
    if not _is_wal(path) or os.access(path.parent, os.W_OK):
        return "ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if wal.is_file() and shm.is_file():
        # A writer is live (or left them): mode=ro reads both without writing.
        return "ro"
    if not wal.is_file() or wal.stat().st_size == 0:
        return "immutable"  # nothing in a -wal to miss
    raise UnreadableStore(
        f"{path} is a WAL store whose {wal.name} holds commits but has no {shm.name}, in a "
        "folder this process cannot write: copy the store with its -wal to a writable "
        "folder, or open it once where it was written so SQLite folds the -wal in"
    )


def reader_uri(path: Path, mode: ReadMode) -> str:
    """The `file:` URI that opens `path` read-only in `mode` (percent-escaped: `?`, `#`, `%`)."""
    query = "mode=ro&immutable=1" if mode == "immutable" else "mode=ro"
    return f"{path.resolve().as_uri()}?{query}"


def _is_wal(path: Path) -> bool:
    with path.open("rb") as fh:
        header = fh.read(20)
    return header.startswith(_HEADER) and header[18] == _WAL_VERSION
