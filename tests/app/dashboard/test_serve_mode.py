"""A dashboard bound beyond this machine writes nothing unless the operator says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import (
    ENV_CHECKPOINT_ROOTS,
    ENV_READ_ONLY,
    ENV_STORE,
    is_loopback,
    load_settings,
    serve_mode,
    to_env,
)
from tests.app.dashboard.apptest import MAIN
from tests.conftest import REPO
from tests.support.cli import rollscope
from tests.support.dashboard_stores import FixtureStore, build_fixture_store
from tests.support.mounts import run_read_only


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_addresses_are_writable(host: str) -> None:
    mode = serve_mode(host)
    assert not mode.read_only
    assert mode.line == f"writable: bound to {host}, reachable from this machine only"


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.7", "no-such-host.invalid"]
)
def test_other_addresses_are_read_only_unless_writes_are_allowed(host: str) -> None:
    mode = serve_mode(host)
    assert mode.read_only
    assert mode.line == f"read-only: bound to {host}; pass --allow-writes to enable Launch"
    allowed = serve_mode(host, allow_writes=True)
    assert not allowed.read_only
    assert allowed.line.startswith(f"writable (--allow-writes): bound to {host}; anyone who")


def test_read_only_flag_wins_everywhere_and_conflicts_with_allow_writes() -> None:
    for host in ("127.0.0.1", "0.0.0.0"):
        assert serve_mode(host, read_only=True).read_only
    with pytest.raises(ValueError, match="--read-only or --allow-writes, not both"):
        serve_mode("0.0.0.0", read_only=True, allow_writes=True)


def test_a_name_is_loopback_only_when_all_its_addresses_are() -> None:
    assert is_loopback("localhost") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("no-such-host.invalid")  # unknown: treated as reachable


def test_the_mode_reaches_the_pages_through_the_settings() -> None:
    for host, allow, writable in (("0.0.0.0", False, False), ("0.0.0.0", True, True),
                                  ("127.0.0.1", False, True)):  # fmt: skip
        mode = serve_mode(host, allow_writes=allow)
        settings = load_settings(to_env("store.db", read_only=mode.read_only))
        assert settings.writes_allowed is writable
        assert settings.read_only is not writable


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> FixtureStore:
    return build_fixture_store(tmp_path_factory.mktemp("dashboard-mode"))


@pytest.mark.parametrize(("allow", "launch"), [(False, False), (True, True)])
def test_pages_offer_launch_only_when_writes_are_allowed(
    fixture_store: FixtureStore, monkeypatch: pytest.MonkeyPatch, allow: bool, launch: bool
) -> None:
    env = to_env(fixture_store.url, read_only=serve_mode("0.0.0.0", allow_writes=allow).read_only)
    for key in (ENV_STORE, ENV_READ_ONLY, ENV_CHECKPOINT_ROOTS):
        monkeypatch.setenv(key, env[key])
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    assert not at.exception
    caption = next(c.value for c in at.caption if c.value.startswith("store `"))
    assert ("read-only" in caption) is not launch
    at.switch_page("launch/page.py").run()  # a link to it opens it either way
    assert not at.exception
    if launch:
        assert at.button  # the form's Launch button
    else:
        assert not at.button and not at.get("form")
        assert "launching runs is switched off" in at.info[0].value


def test_cli_refuses_both_flags_in_one_line(tmp_path: Path) -> None:
    res = rollscope(
        "dashboard", "--store", tmp_path / "s.db", "--read-only", "--allow-writes", cwd=tmp_path
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: give --read-only or --allow-writes, not both"
    ]
    assert not (tmp_path / "s.db").exists()


def test_a_store_that_cannot_be_written_here_is_served_read_only() -> None:
    mode = serve_mode("127.0.0.1", unwritable="it is on a read-only file system")
    assert mode.read_only
    assert mode.line == (
        "read-only: the store cannot be written here (it is on a read-only file system), so "
        "Launch is off; bound to 127.0.0.1"
    )
    # --read-only says so itself; --allow-writes cannot make the file writable.
    assert serve_mode("0.0.0.0", allow_writes=True, unwritable="x").read_only
    assert serve_mode("127.0.0.1", read_only=True, unwritable="x").line.endswith(
        "(--read-only): bound to 127.0.0.1"
    )


def test_the_dashboard_finds_a_store_on_a_read_only_file_system(
    fixture_store: FixtureStore, tmp_path: Path
) -> None:
    view = tmp_path / "view"
    view.mkdir()
    store = Path(fixture_store.url.removeprefix("sqlite:///"))
    code = (
        "import sys; from app.dashboard.serve import store_unwritable; "
        "print(store_unwritable(sys.argv[1])); print(store_unwritable(sys.argv[2]))"
    )
    res = run_read_only(
        store.parent, view,
        [sys.executable, "-c", code, view / store.name, tmp_path / "elsewhere.db"],
        cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["it is on a read-only file system", "None"]
