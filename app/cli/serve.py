"""`rollscope dashboard`: serve the Streamlit dashboard on a store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli.listen import bind
from app.cli.output import err, fail
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from app.store_url import shown_url
from rollout_core.clip import clip


def dashboard(
    store: StoreOpt = DEFAULT_STORE,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    host: Annotated[
        str, typer.Option(help="Address to bind; not loopback: read-only unless --allow-writes.")
    ] = "127.0.0.1",
    read_only: Annotated[bool, typer.Option(help="Hide Launch; no writes.")] = False,
    allow_writes: Annotated[
        bool,
        typer.Option(
            envvar="ROLLSCOPE_ALLOW_WRITES",
            help="Keep Launch and Cancel on a non-loopback --host (put it behind authentication).",
        ),
    ] = False,
    checkpoint_root: Annotated[
        list[Path] | None, typer.Option(help="Folders Launch may load checkpoints from.")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Offer Launch on this Ray cluster (auto, HOST:6379, or local)."),
    ] = None,
    dataset_root: Annotated[
        list[Path] | None,
        typer.Option(help="Folders Launch may read questions files from (demo always works)."),
    ] = None,
) -> None:
    """Serve the Streamlit dashboard on a store.

    Bound to a non-loopback address, it is read-only (no Launch, no Cancel) unless
    --allow-writes is given; the first line it prints says which.
    """
    from app.dashboard.serve import serve
    from app.dashboard.settings import serve_mode
    from storage.engine import StoreMissing
    from storage.store import Store, StoreError

    try:
        mode = serve_mode(host, read_only=read_only, allow_writes=allow_writes)
    except ValueError as exc:
        fail(str(exc))
    _check_folders("--checkpoint-root", checkpoint_root or [], "checkpoints")
    _check_folders("--dataset-root", dataset_root or [], "questions files")
    # Streamlit binds the address itself, and told a bad one in a traceback: tried here first.
    bind(host, port).close()

    # A bad URL or an unreadable store fails here, in one line, not inside the page. A writable
    # dashboard creates a missing store (its Launch would); it never upgrades an existing one.
    notes = []
    try:
        Store(store, read_only=True).close()
    except StoreMissing as exc:
        if read_only:
            fail(str(exc))
        open_store(store).close()
        # Said: a mistyped --store otherwise opens an empty dashboard without a word. Bound
        # to a public address (Docker's volume), Launch is off: runs come from other writers.
        fills = (
            "runs recorded there show as they begin"
            if mode.read_only
            else "Launch records its runs there"
        )
        notes.append(f"note: no store at {shown_url(store)}: made a new, empty one ({fills})")
    except StoreError as exc:
        fail(str(exc))
    serve(
        store,
        notes=notes,
        port=port,
        host=host,
        read_only=read_only,
        allow_writes=allow_writes,
        checkpoint_roots=checkpoint_root or [],
        ray_address=ray_address,
        dataset_roots=dataset_root or [],
    )


def _check_folders(option: str, folders: list[Path], holding: str) -> None:
    """A file given as a folder is refused. A missing folder is told, not refused: a training
    run may not have made it yet, and Launch reads it once it exists."""
    for folder in folders:
        try:
            exists = folder.exists()
        except OSError as exc:  # a name past the file system's length, for one
            fail(f"{option} {clip(str(folder), 80)} cannot be used ({exc.strerror})")
        if exists and not folder.is_dir():
            fail(f"{option} {folder} is a file: name the folder that holds the {holding}")
        if not exists:
            err.print(
                f"note: {option} {folder.resolve()} does not exist (yet): Launch finds {holding} "
                "in it once it does",
                soft_wrap=True,
            )
