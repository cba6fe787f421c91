"""Turn this process into the Streamlit dashboard: `serve(store_url, port=...)`.

The process execs Streamlit rather than starting it as a child, so a SIGTERM from a process
manager (`docker stop`, systemd, a test harness) reaches Streamlit itself and never leaves an
orphaned server behind; it also frees whatever the caller had loaded (the demo's torch). And
it stops when whatever started it ends (`stop_with_parent`).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from app.dashboard.settings import serve_mode, to_env
from storage.engine import StoreError, normalize_url, why_unwritable

MAIN_SCRIPT = Path(__file__).resolve().parent / "main.py"


def absolute_store_url(store_url: str) -> str:
    """A bare SQLite path made absolute, so the child process finds it from any directory."""
    if "://" in store_url:
        return store_url
    return str(Path(store_url).expanduser().resolve())


def store_unwritable(store_url: str) -> str | None:
    """Why a SQLite store cannot be written from this process; None when it can, and for
    other databases (their permissions are the server's to enforce)."""
    try:
        url = normalize_url(store_url)
    except StoreError:
        return None  # the dashboard's pages say what is wrong with the URL
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    return why_unwritable(url.database)


def streamlit_command(*, port: int, host: str, headless: bool) -> list[str]:
    """The `streamlit run` command line of the dashboard."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(MAIN_SCRIPT),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true" if headless else "false",
        "--browser.gatherUsageStats",
        "false",
    ]


_PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal the kernel sends this process when its parent ends."""


def stop_with_parent() -> None:
    """Have the kernel send SIGTERM to this process, and to the Streamlit it becomes, when the
    process that started it ends (Linux; kept across exec).

    A shell script, `sh -c` or `make` runs the dashboard as its child: stopping them with a
    signal, or killing them, left Streamlit serving its port with parent PID 1. Not done for a
    dashboard meant to outlive its starter: under nohup (SIGHUP ignored), put in the
    background by a script (`... &` without job control: SIGINT ignored), or leading its own
    session (setsid, systemd).
    """
    if os.getsid(0) == os.getpid():
        return
    if signal.SIG_IGN in (signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGINT)):
        return
    end_with_parent()


def end_with_parent() -> None:
    """Have the kernel send SIGTERM to this process when the process that started it ends
    (Linux; kept across exec). Elsewhere it does nothing."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return
    if os.getppid() != parent:  # it ended before the kernel was asked: stop as it would
        raise SystemExit("rollscope: the process that started this one has ended")


def serve(
    store_url: str,
    *,
    port: int = 8501,
    host: str = "127.0.0.1",
    read_only: bool = False,
    allow_writes: bool = False,
    checkpoint_roots: Sequence[Path] = (),
    dataset_roots: Sequence[Path] = (),
    headless: bool = True,
    ray_address: str | None = None,
    notes: Sequence[str] = (),
) -> NoReturn:
    """Replace this process with the dashboard; its exit code becomes the process's.

    Prints the mode first (`serve_mode`): on a non-loopback address the dashboard is
    read-only unless `allow_writes`; then `notes`, a line each. ValueError when both flags
    are given.
    """
    mode = serve_mode(
        host,
        read_only=read_only,
        allow_writes=allow_writes,
        unwritable=None if read_only else store_unwritable(store_url),
    )
    env = dict(os.environ)
    env.update(
        to_env(
            absolute_store_url(store_url),
            read_only=mode.read_only,
            checkpoint_roots=checkpoint_roots,
            ray_address=ray_address,
            dataset_roots=dataset_roots,
        )
    )
    command = streamlit_command(port=port, host=host, headless=headless)
    stop_with_parent()
    print(f"rollscope dashboard: {mode.line}", flush=True)  # before the notes, in one log
    for note in notes:
        print(note, file=sys.stderr)
    sys.stderr.flush()  # what was printed must not die with this process image
    os.execve(command[0], command, env)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """`python -m app.dashboard.serve --store URL [--port N]`: serve without the full CLI."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="store URL or SQLite path")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--allow-writes", action="store_true")
    parser.add_argument("--checkpoint-root", type=Path, action="append", default=[])
    parser.add_argument("--dataset-root", type=Path, action="append", default=[])
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args(argv)
    try:
        serve(
            args.store,
            port=args.port,
            host=args.host,
            read_only=args.read_only,
            allow_writes=args.allow_writes,
            checkpoint_roots=args.checkpoint_root,
            ray_address=args.ray_address,
            dataset_roots=args.dataset_root,
        )
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
