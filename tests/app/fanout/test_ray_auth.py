"""Joining a Ray cluster that `ray start` made, whose token authentication is on by default."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.fanout import ray_auth
from storage.store import Store
from tests.conftest import REPO
from tests.support.ports import free_port

pytest.importorskip("ray", reason="the Ray tests need the ray extra: pip install 'rollscope[ray]'")


def test_token_sources_in_the_order_ray_reads_them(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("abc")
    (tmp_path / ".ray").mkdir()
    assert ray_auth.token_source({}, tmp_path) is None
    (tmp_path / ".ray" / "auth_token").write_text("abc")
    assert ray_auth.token_source({}, tmp_path) == str(tmp_path / ".ray" / "auth_token")
    env = {ray_auth.TOKEN_PATH: str(token_file)}
    assert ray_auth.token_source(env, tmp_path) == str(token_file)
    assert ray_auth.token_source({**env, ray_auth.TOKEN: "xyz"}, tmp_path) == ray_auth.TOKEN
    missing = {ray_auth.TOKEN_PATH: str(tmp_path / "nope")}
    assert ray_auth.token_source(missing, tmp_path) == str(tmp_path / ".ray" / "auth_token")


def test_token_mode_is_asked_for_only_with_a_token_and_no_choice_made(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert ray_auth.ask_for_token_auth(env, tmp_path, imported=()) is None  # no token anywhere
    assert env == {} and "RAY_AUTH_TOKEN=`ray get-auth-token`" in ray_auth.token_hint(env)

    env[ray_auth.TOKEN] = "abc"
    note = ray_auth.ask_for_token_auth(env, tmp_path, imported=())
    assert note is not None and "token from RAY_AUTH_TOKEN" in note
    assert env[ray_auth.AUTH_MODE] == "token" and ray_auth.token_hint(env) == ""

    env[ray_auth.AUTH_MODE] = "disabled"  # the user's choice stands
    assert ray_auth.ask_for_token_auth(env, tmp_path, imported=()) is None
    assert env[ray_auth.AUTH_MODE] == "disabled"
    assert "needs RAY_AUTH_MODE=token (it is 'disabled')" in ray_auth.token_hint(env)


def test_nothing_changes_once_ray_is_imported(tmp_path: Path) -> None:
    env = {ray_auth.TOKEN: "abc"}
    assert ray_auth.ask_for_token_auth(env, tmp_path, imported={"ray"}) is None
    assert ray_auth.AUTH_MODE not in env  # Ray read its mode already


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def started_head(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A head node as its user makes one with token authentication: `ray get-auth-token
    --generate` (HOME/.ray/auth_token), then `ray start --head`, which turns authentication on
    because the token is there. Yields its address and that user's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # A temp dir of its own: `ray start` records its address in TMPDIR/ray, where a later
    # `ray.init()` (the other Ray tests) would try to join it. Short, for Ray's socket paths.
    temp = Path(tempfile.mkdtemp(prefix="rs-ray-", dir="/tmp"))
    env |= {"HOME": str(tmp_path), "TMPDIR": str(temp), "RAY_USAGE_STATS_ENABLED": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    ray_cli = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray_cli, "get-auth-token", "--generate"], env=env, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    assert (tmp_path / ".ray" / "auth_token").is_file()
    port = free_port()
    head = subprocess.Popen(
        [ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not _listening(port):
            assert head.poll() is None, "ray start --head exited"
            assert time.monotonic() < deadline, "ray start --head did not listen"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", env
    finally:
        # Every process the head started is in its process group: killed at once. (SIGTERM to
        # `ray start --block` stops them gracefully, in 33 s here.)
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_a_run_joins_a_cluster_with_token_auth_without_being_told(
    started_head: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    address, env = started_head
    db = tmp_path / "store.db"
    run = [sys.executable, "-m", "app.cli", "run", "--policy", "oracle", "--dataset", "demo",
           "--limit", "6", "--store", str(db), "--ray", address, "--workers", "1"]  # fmt: skip
    res = subprocess.run(run, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Ray token authentication on (token from" in res.stdout + res.stderr
    [summary] = Store(str(db), read_only=True).list_runs()
    assert (summary.status, summary.episodes_finished, summary.correct) == ("completed", 6, 6)

    # A user who turned token mode off is refused in one line that says what is needed.
    # Ray tries to join 20 times, a second apart, before it gives up: 2 tell the same.
    off = {**env, ray_auth.AUTH_MODE: "disabled", "RAY_NUM_REDIS_GET_RETRIES": "2"}
    res = subprocess.run(
        [*run[:-4], "--name", "off", "--ray", address, "--workers", "1"],
        cwd=REPO, env=off, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    error = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "needs RAY_AUTH_MODE=token (it is 'disabled')" in error[0]
