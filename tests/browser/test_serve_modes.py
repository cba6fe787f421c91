"""`rollscope dashboard --host 0.0.0.0` as a process: it says it is read-only, and is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import REPO, stop, wait_healthy

pytestmark = pytest.mark.browser


def _free_port_on_all_interfaces() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _start(
    store: Path, log: Path, extra: list[str], env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port_on_all_interfaces()
    cmd = [sys.executable, "-m", "app.cli", "dashboard", "--store", str(store),
           "--host", "0.0.0.0", "--port", str(port), *extra]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=os.environ | env
        )
    base_url = f"http://127.0.0.1:{port}"  # every interface includes loopback
    wait_healthy(base_url, proc, log)
    return proc, base_url


@pytest.mark.parametrize(
    ("extra", "env"),
    [([], {}), (["--allow-writes"], {}), ([], {"ROLLSCOPE_ALLOW_WRITES": "1"})],
    ids=["default", "flag", "env"],
)
def test_all_interfaces_start_read_only_unless_writes_are_allowed(
    page: Any, tmp_path: Path, extra: list[str], env: dict[str, str]
) -> None:
    allow = bool(extra or env)
    log = tmp_path / "dashboard.log"
    proc, base_url = _start(tmp_path / "store.db", log, extra, env)
    try:
        page.goto(f"{base_url}/runs")
        page.locator("[data-testid='stTopNav']").get_by_text("Runs").first.wait_for()
        # the header's store line says the mode on every page
        caption = page.locator("[data-testid='stCaptionContainer']").filter(has_text="store")
        caption.first.wait_for()
        assert ("read-only" in caption.first.inner_text()) is not allow
        page.goto(f"{base_url}/launch")  # a deep link cannot reach it either
        if allow:
            page.get_by_role("button", name="Launch").wait_for()
        else:  # said on the page, out of the menu, and no form
            page.get_by_text("launching runs is switched off").wait_for()
            nav = page.locator("[data-testid='stTopNav']")
            assert nav.get_by_text("Launch").count() == 0 and nav.get_by_text("Runs").count() > 0
            assert page.get_by_role("button", name="Launch").count() == 0
    finally:
        stop(proc)
    first = log.read_text().splitlines()[0]
    if allow:
        assert first.startswith("rollscope dashboard: writable (--allow-writes): bound to 0.0.0.0")
    else:
        assert first == (
            "rollscope dashboard: read-only: bound to 0.0.0.0; pass --allow-writes to enable Launch"
        )
