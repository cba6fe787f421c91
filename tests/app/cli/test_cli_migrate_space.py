"""`rollscope migrate` says how much of a SQLite file an upgrade left in free pages (a revision
that rebuilds a table leaves the old copy's), and how to give them back to the disk."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from storage.store import Store
from tests.support.cli import rollscope
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

_FREED = re.compile(r"([\d,]+) MB of the file's ([\d,]+) MB are free pages the upgrade left")


def _store_with_steps(path: Path, episodes: int) -> str:
    url = f"sqlite:///{path}"
    store = Store(url)
    try:
        run = store.create_run(spec("long-outputs"), episodes_planned=episodes)
        sink = store.sink(run)
        for i in range(episodes):
            sink.write(play(f"q{i}", 0, "correct", 1.0, 3, raw="SELECT 1 -- " + "x" * 2_000))
    finally:
        store.close()
    return url


def test_an_upgrade_that_rebuilds_the_steps_says_what_it_left_free(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = _store_with_steps(path, 600)
    downgrade_to(url, "0027")  # 0028 rebuilds `steps`: its old pages are left free

    done = rollscope("migrate", "--store", path)
    assert done.returncode == 0, done.stderr
    found = _FREED.search(done.stdout.replace("\n", " "))
    assert found is not None, done.stdout
    free_mb, size_mb = (int(g.replace(",", "")) for g in found.groups())
    with closing(sqlite3.connect(path)) as db:
        pages, free, page = (
            db.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    assert (free_mb, size_mb) == (round(free * page / 1e6), round(pages * page / 1e6))
    assert free_mb >= 3  # the steps' 1,800 outputs of 2 KB
    assert "VACUUM" in done.stdout

    again = rollscope("migrate", "--store", path)
    assert again.returncode == 0 and "free pages" not in again.stdout


def test_a_new_store_and_an_upgrade_leaving_little_free_say_nothing_of_it(
    tmp_path: Path,
) -> None:
    made = rollscope("migrate", "--store", tmp_path / "new.db")
    assert made.returncode == 0 and "free pages" not in made.stdout

    path = tmp_path / "small.db"
    url = _store_with_steps(path, 3)
    downgrade_to(url, "0027")
    small = rollscope("migrate", "--store", path)
    assert small.returncode == 0 and "0027 -> " in small.stdout
    assert "free pages" not in small.stdout  # under a megabyte
