"""The address a server listens on, bound before anything starts: a port out of range, a host
that does not resolve or a port in use is told in one line (exit 2), not in a traceback."""

from __future__ import annotations

import socket

from app.cli.output import fail
from rollout_core.clip import clip


def bind(host: str, port: int) -> socket.socket:
    """The listening socket on `host`:`port` (0: any free port)."""
    if not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    shown = clip(host, 80)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:  # an unknown host name (socket.gaierror) too
        sock.close()
        if exc.errno == 98:  # EADDRINUSE
            fail(f"port {port} on {shown} is in use: choose another --port (0: any free one)")
        fail(f"cannot listen on {shown}:{port}: {exc.strerror or exc}")
    except (UnicodeError, TypeError):  # a non-ASCII name IDNA cannot encode
        sock.close()
        fail(f"cannot listen on {shown}: not a host name or address")
    sock.listen(2048)
    return sock
