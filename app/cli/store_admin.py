"""`rollscope migrate`: bring a store to the schema this rollscope needs."""

from __future__ import annotations

from app.cli.output import out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from app.store_url import shown_url

FREE_SHOWN = 0.1
"""The share of a SQLite file in free pages after an upgrade worth a line: a revision that
rebuilds a table leaves the old one's pages free, as many as the table had."""


def migrate(store: StoreOpt = DEFAULT_STORE) -> None:
    """Upgrade a store to the schema this rollscope needs (a new store is created)."""
    opened = open_store(store)
    upgrade = opened.schema_upgrade
    assert upgrade is not None  # a writer always reports what it did
    if upgrade.before == upgrade.after:
        out.print(f"store {shown_url(store)}: already at schema {upgrade.after}", soft_wrap=True)
        return
    before = upgrade.before or "none (new store)"
    out.print(f"store {shown_url(store)}: schema {before} -> {upgrade.after}", soft_wrap=True)
    space = opened.file_space()
    if upgrade.before is None or space is None:
        return
    size, free = space
    if free >= 2**20 and free >= FREE_SHOWN * size:
        out.print(
            f"{free / 1e6:,.0f} MB of the file's {size / 1e6:,.0f} MB are free pages the "
            "upgrade left (the old copies of rebuilt tables): later writes reuse them, and "
            "SQLite's VACUUM gives them back to the disk (`sqlite3 FILE 'VACUUM'` while nothing "
            "else has the store open; it needs about the store's size in free disk)",
            soft_wrap=True,
        )
