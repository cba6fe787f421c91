"""The `--store` option and opening a store for a command, refused in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.output import fail
from app.store_url import shown_url

if TYPE_CHECKING:
    from storage.store import Store

DEFAULT_STORE = "sqlite:///rollscope.db"
StoreOpt = Annotated[
    str, typer.Option("--store", envvar="ROLLSCOPE_STORE", help="SQLAlchemy URL or SQLite path.")
]


def open_store(url: str, *, existing: str | None = None) -> Store:
    """A store opened to write (upgraded to the newest schema as needed); created unless
    `existing` says what the command needs from a store that is already there."""
    from storage.engine import StoreMissing
    from storage.store import Store, StoreError

    if existing is not None:
        try:
            Store(url, read_only=True).close()
        except StoreMissing:
            fail(f"no store at {shown_url(url)}: {existing} (check --store)")
        except StoreError:
            pass  # opened to write below: upgraded, or refused with the reason
    try:
        return Store(url)
    except StoreError as exc:
        fail(str(exc))


def store_exists(url: str) -> bool:
    """Whether there is a store at `url` to open (one too old or too new included); an
    unreachable server counts as there, so that opening it says why it failed."""
    from storage.engine import StoreMissing
    from storage.store import Store, StoreError

    try:
        Store(url, read_only=True).close()
    except StoreMissing:
        return False
    except StoreError:
        return True
    return True


def refuse_uncreatable(url: str) -> None:
    """Refuse in one line a new SQLite store this process could not create, found without
    creating it: a command that does something long first (builds a policy) says so at once."""
    from storage.engine import normalize_url, unwritable_store
    from storage.store import StoreError

    try:
        parsed = normalize_url(url)
    except StoreError as exc:
        fail(str(exc))
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return  # a server says itself, when the store is opened, why it cannot take it
    if (refused := unwritable_store(shown_url(url), parsed.database)) is not None:
        fail(str(refused))


def open_reader(url: str) -> Store:
    """A store opened to read: never created, migrated or written; refused in one line."""
    from storage.store import Store, StoreError

    try:
        return Store(url, read_only=True)
    except StoreError as exc:
        fail(str(exc))
