"""Start the Streamlit dashboard as a child process: `serve(store_url, port=...)`."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from app.dashboard.settings import to_env

MAIN_SCRIPT = Path(__file__).resolve().parent / "main.py"


def absolute_store_url(store_url: str) -> str:
    """A bare SQLite path made absolute, so the child process finds it from any directory."""
    if "://" in store_url:
        return store_url
    return str(Path(store_url).expanduser().resolve())


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


def serve(
    store_url: str,
    *,
    port: int = 8501,
    host: str = "127.0.0.1",
    read_only: bool = False,
    checkpoint_roots: Sequence[Path] = (),
    headless: bool = True,
) -> int:
    """Run the dashboard until it exits or is interrupted; returns its exit code."""
    env = dict(os.environ)
    env.update(
        to_env(
            absolute_store_url(store_url),
            read_only=read_only,
            checkpoint_roots=checkpoint_roots,
        )
    )
    proc = subprocess.Popen(streamlit_command(port=port, host=host, headless=headless), env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m app.dashboard.serve --store URL [--port N]`: serve without the full CLI."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="store URL or SQLite path")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--checkpoint-root", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    return serve(
        args.store,
        port=args.port,
        host=args.host,
        read_only=args.read_only,
        checkpoint_roots=args.checkpoint_root,
    )


if __name__ == "__main__":
    raise SystemExit(main())
