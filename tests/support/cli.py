"""The `rollscope` command in tests: run in a subprocess as a user runs it, or in this process
for its exit code and message (no start-up cost per case)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import REPO


def rollscope_cmd(*args: str | Path) -> list[str]:
    """The command line of `rollscope ARGS` with this interpreter."""
    return [sys.executable, "-m", "app.cli", *map(str, args)]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for CLI subprocesses: the repo importable, the test's ROLLSCOPE_HOME,
    no store from the caller's environment; plus `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("ROLLSCOPE_STORE", None)
    return env | dict(extra or {})


def rollscope(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to the end (in `cwd`, the repo by default, with `cli_env(env)`) and
    capture its output."""
    return subprocess.run(
        rollscope_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env=cli_env(env),
        check=False,
    )


def in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str | Path
) -> tuple[int, str]:
    """The CLI's exit code and stderr, run in this process."""
    done = rollscope_here(monkeypatch, capsys, *args)
    return done.returncode, done.stderr


def rollscope_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """The CLI run in this process, its exit code and output as `rollscope` gives them: for
    the many refusals a file checks, which would each pay the interpreter's start-up."""
    from app import cli

    argv = ["rollscope", *map(str, args)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, int(exited.value.code or 0), out.out, out.err)


def rollscope_in_terminal(
    *args: str | Path, timeout: float = 240, columns: int = 120
) -> tuple[int, str]:
    """Run the CLI with its stdout and stderr on a pseudo-terminal (120 columns unless told),
    as a user at a shell sees it; its exit code and everything it wrote there, control
    sequences and all."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = cli_env()
    for size in ("COLUMNS", "LINES"):  # the terminal's own size, not a caller's
        env.pop(size, None)
    with subprocess.Popen(
        rollscope_cmd(*args), stdout=follower, stderr=follower, cwd=REPO, env=env
    ) as proc:
        os.close(follower)
        shown, deadline = bytearray(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal is closed once the process is gone
                    break
                if not chunk:
                    break
                shown += chunk
        else:
            proc.kill()
        os.close(leader)
        code = proc.wait(timeout=10)
    return code, shown.decode("utf-8", "replace")
