"""`rollscope dashboard` as a process: a SIGTERM stops the server itself, leaving nothing behind."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from tests.browser.conftest import start_dashboard

pytestmark = pytest.mark.slow


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_cli_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    proc, base_url = start_dashboard(str(tmp_path / "store.db"), tmp_path / "dashboard.log")
    port = int(base_url.rsplit(":", 1)[1])
    assert _port_open(port)
    proc.send_signal(sig)
    proc.wait(timeout=20)
    # What a process manager sees end must be the server: nothing may still answer on the port.
    deadline = time.monotonic() + 5
    while _port_open(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _port_open(port), (tmp_path / "dashboard.log").read_text()[-2000:]
