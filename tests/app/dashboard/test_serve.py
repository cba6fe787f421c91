"""The dashboard's process: its settings through the env, the Streamlit command it becomes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.dashboard.serve import absolute_store_url, streamlit_command
from app.dashboard.settings import load_settings, to_env


def test_settings_round_trip_through_env(tmp_path: Path) -> None:
    env = to_env("sqlite:///x.db", read_only=True, checkpoint_roots=[tmp_path, tmp_path / "b"])
    got = load_settings(env)
    assert got.store_url == "sqlite:///x.db" and got.read_only
    assert got.checkpoint_roots == (tmp_path.resolve(), (tmp_path / "b").resolve())
    assert load_settings({}).store_url == "rollscope.db" and not load_settings({}).read_only


def test_serve_command_and_store_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = streamlit_command(port=8765, host="127.0.0.1", headless=True)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert cmd[4].endswith("app/dashboard/main.py") and Path(cmd[4]).is_file()
    assert cmd[cmd.index("--server.port") + 1] == "8765"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("a.db") == str(tmp_path.resolve() / "a.db")
    assert absolute_store_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"
