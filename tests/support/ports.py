"""Loopback ports for the servers tests start."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A loopback port free right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something answers on a loopback port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def port_closes(port: int, seconds: float = 10.0) -> bool:
    """Whether nothing answers on the port within `seconds`."""
    deadline = time.monotonic() + seconds
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not port_open(port)
