"""What a server process loads: OpenEnv's production routes, not its web interface, whose
gradio import was most of a server's and each worker's start-up."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import cli_env

# The modules `rollscope env-server` and each of its workers import, in the CLI's order.
SERVER_IMPORTS = "import app.cli, app.env_server.serving, app.env_server.asgi"


def _loaded(code: str) -> list[str]:
    res = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print(*sorted(sys.modules), sep='\\n')"],
        capture_output=True, text=True, env=cli_env(), timeout=120, check=True,
    )  # fmt: skip
    return res.stdout.split()


def test_a_server_process_loads_openenv_without_its_web_interface() -> None:
    loaded = _loaded(SERVER_IMPORTS)
    assert "openenv.core.env_server.http_server" in loaded
    assert "gradio" not in loaded


def test_a_process_that_imported_openenv_first_keeps_its_web_interface() -> None:
    # A user's own process may serve OpenEnv's web interface beside rollscope's server code.
    loaded = _loaded(f"import openenv.core.env_server; {SERVER_IMPORTS}")
    assert "openenv.core.env_server.web_interface" in loaded
