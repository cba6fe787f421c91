"""`rollscope dashboard` as a process: a SIGTERM stops the server itself, leaving nothing behind,
and so does the end of a script that started it."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.browser.conftest import (
    REPO,
    START_TIMEOUT_S,
    free_port,
    start_dashboard,
    wait_healthy,
)
from tests.support.ports import port_closes, port_open

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_cli_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    proc, base_url = start_dashboard(str(tmp_path / "store.db"), tmp_path / "dashboard.log")
    port = int(base_url.rsplit(":", 1)[1])
    assert port_open(port)
    proc.send_signal(sig)
    proc.wait(timeout=20)
    # What a process manager sees end must be the server: nothing may still answer on the port.
    assert port_closes(port, 5), (tmp_path / "dashboard.log").read_text()[-2000:]


def test_a_dashboard_on_a_missing_store_says_it_made_one(tmp_path: Path) -> None:
    log = tmp_path / "dashboard.log"
    proc, _ = start_dashboard(str(tmp_path / "typo.db"), log)
    try:
        assert (tmp_path / "typo.db").exists()
        said = log.read_text().splitlines()
        assert said[:2] == [  # the mode first, as on every start
            "rollscope dashboard: writable: bound to 127.0.0.1, reachable from this machine only",
            f"note: no store at {tmp_path / 'typo.db'}: made a new, empty one (Launch records "
            "its runs there)",
        ], said
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_public_dashboard_on_a_missing_store_says_who_fills_it(tmp_path: Path) -> None:
    # Docker's CMD: bound to 0.0.0.0, so read-only; a job writes the volume's store later.
    log = tmp_path / "dashboard.log"
    proc, _ = start_dashboard(str(tmp_path / "volume.db"), log, "--host", "0.0.0.0")
    try:
        said = log.read_text().splitlines()
        assert said[1] == (
            f"note: no store at {tmp_path / 'volume.db'}: made a new, empty one (runs recorded "
            "there show as they begin)"
        ), said
        assert "Launch" not in said[1]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


_WAIT_FOR_PORT = (
    "import socket, sys, time\n"
    "while socket.socket().connect_ex(('127.0.0.1', int(sys.argv[1]))): time.sleep(0.3)"
)


def _terminal_signals() -> None:
    """SIGHUP and SIGINT as a terminal's shell gives them, whatever the suite was started
    under (`nohup` ignores SIGHUP, a background job SIGINT): the dashboard decides from them
    whether to outlive its script."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def _script(
    tmp_path: Path, first_line: str, *, background: bool = False
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A shell script that runs the dashboard as its child (a command follows it, so the shell
    cannot exec it), in a session of its own: whatever it leaves is killed after the test.
    `background`: started with `&`, the script waits until the dashboard serves, then ends."""
    port = free_port()
    command = shlex.join(
        [sys.executable, "-m", "app.cli", "dashboard", "--store", str(tmp_path / "s.db")]
    )
    then = ""
    if background:
        then = "&\n" + shlex.join([sys.executable, "-c", _WAIT_FOR_PORT, str(port)])
    script = tmp_path / "serve.sh"
    script.write_text(
        f"{first_line}\ncd {shlex.quote(str(REPO))}\n{command} --port {port} {then}\necho done\n"
    )
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["sh", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminal_signals,
        )
    try:
        if background:
            proc.wait(timeout=START_TIMEOUT_S)
        else:
            wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        yield proc, port
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_end_of_the_script_that_started_it_stops_the_server(tmp_path: Path) -> None:
    # A script stopped with SIGTERM (a process manager, `kill` of the pid a user has) ends
    # without signalling its child: the server went on serving with parent PID 1.
    with _script(tmp_path, "#!/bin/sh") as (proc, port):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        assert port_closes(port), (tmp_path / "dashboard.log").read_text()[-2000:]


def test_a_dashboard_under_nohup_outlives_its_script(tmp_path: Path) -> None:
    # SIGHUP ignored, as nohup does: the dashboard was asked to outlive whoever started it.
    with _script(tmp_path, "trap '' HUP") as (proc, port):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        time.sleep(2)
        assert port_open(port)


def test_a_dashboard_a_script_put_in_the_background_outlives_it(tmp_path: Path) -> None:
    # `rollscope dashboard ... &` in a script that ends once it serves: the server stays up.
    with _script(tmp_path, "#!/bin/sh", background=True) as (_, port):
        time.sleep(2)
        assert port_open(port)
