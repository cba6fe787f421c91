"""A real dashboard process on a loopback port and a real Chromium driven by Playwright."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.dashboard_stores import FixtureStore, build_fixture_store

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Dashboard:
    """A running dashboard and the fixture store it serves."""

    base_url: str
    store: FixtureStore
    log: Path

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll Streamlit's health endpoint until it answers; fail with the server log otherwise."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dashboard exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(
        f"dashboard did not answer within {START_TIMEOUT_S:.0f}s:\n{log.read_text()[-3000:]}"
    )


def start_dashboard(store_url: str, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m app.cli dashboard --store URL --port FREE` started and healthy."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "app.cli",
        "dashboard",
        "--store",
        store_url,
        "--port",
        str(port),
        *extra,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    wait_healthy(base_url, proc, log)
    return proc, base_url


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.skip("browser tests need playwright: pip install playwright")
    # `expect` waits 5 s by default, where the pages wait 30 (`open_page`): on a loaded 2-core
    # machine a page rerun took longer than 5 s, and an assertion that would have held failed.
    expect.set_options(timeout=15_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextmanager
def serving(build: Callable[[Path], Any], root: Path) -> Iterator[Dashboard]:
    """A dashboard on the store `build` makes under `root`, stopped when the block ends."""
    store = build(root)
    log = root / "dashboard.log"
    proc, base_url = start_dashboard(store.url, log)
    try:
        yield Dashboard(base_url, store, log)
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def dashboard(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    with serving(build_fixture_store, tmp_path_factory.mktemp("browser")) as served:
        yield served


@contextmanager
def open_page(
    chromium: Any, width: int = 1400, height: int = 1000, **context: Any
) -> Iterator[Any]:
    """A page in a fresh browser context of the given viewport (generous waits for a loaded
    machine: Playwright's auto-waiting, never fixed sleeps)."""
    ctx = chromium.new_context(viewport={"width": width, "height": height}, **context)
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    try:
        yield pg
    finally:
        ctx.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def page(chromium: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A 1400 x 1000 page. A failed test prints what the browser saw: its console, and when
    its connection to the server opened and closed (a dropped socket loses a click)."""
    seen: list[str] = []
    with open_page(chromium) as pg:
        pg.on("console", lambda m: seen.append(f"console {m.type}: {m.text}"))
        pg.on("pageerror", lambda e: seen.append(f"page error: {e}"))
        pg.on("websocket", lambda ws: _watch_socket(ws, seen))
        yield pg
        if request.node.stash.get(_FAILED, False):
            print(f"page at {pg.url}; the browser saw:", *seen[-40:], sep="\n  ")


def _watch_socket(ws: Any, seen: list[str]) -> None:
    start = time.monotonic()
    seen.append(f"socket opened: {ws.url}")
    ws.on("close", lambda _: seen.append(f"socket closed after {time.monotonic() - start:.1f}s"))


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot to artifacts/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
