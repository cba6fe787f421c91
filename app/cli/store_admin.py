"""`rollscope migrate`: bring a store to the schema this rollscope needs."""

from __future__ import annotations

from app.cli.output import out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store


def migrate(store: StoreOpt = DEFAULT_STORE) -> None:
    """Upgrade a store to the schema this rollscope needs (a new store is created)."""
    upgrade = open_store(store).schema_upgrade
    assert upgrade is not None  # a writer always reports what it did
    if upgrade.before == upgrade.after:
        out.print(f"store {store}: already at schema {upgrade.after}", soft_wrap=True)
    else:
        before = upgrade.before or "none (new store)"
        out.print(f"store {store}: schema {before} -> {upgrade.after}", soft_wrap=True)
