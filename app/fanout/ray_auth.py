"""Ray's token authentication for a driver that joins a cluster `ray start` made.

Since Ray 2.5x `ray start --head` turns token authentication on and writes the token to
`~/.ray/auth_token`; a driver that does not ask for token mode is refused, and Ray reports it as
an unreachable cluster after 20 s of retries. A driver that asks for it joins a cluster without
authentication just as well (checked against Ray 2.60), so rollscope asks whenever a token is
at hand and the user chose no mode.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container, Mapping, MutableMapping
from pathlib import Path

AUTH_MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"


def token_source(env: Mapping[str, str], home: Path) -> str | None:
    """Where Ray would read a token from, as a user would name it; None when there is none."""
    if env.get(TOKEN, "").strip():
        return TOKEN
    path = env.get(TOKEN_PATH, "").strip()
    if path and Path(path).is_file():
        return path
    default = home / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def ask_for_token_auth(
    env: MutableMapping[str, str] = os.environ,
    home: Path | None = None,
    imported: Container[str] = sys.modules,
) -> str | None:
    """Turn on Ray's token mode for this process (`env`) when a token is at hand and
    RAY_AUTH_MODE is unset; returns a note saying so, or None when nothing changed.

    Ray reads the mode when it is first imported: called after that, it changes nothing.
    """
    if AUTH_MODE in env or "ray" in imported:
        return None
    source = token_source(env, Path.home() if home is None else home)
    if source is None:
        return None
    env[AUTH_MODE] = "token"
    return f"Ray token authentication on (token from {source}; set {AUTH_MODE} to choose)"


def token_hint(env: Mapping[str, str] = os.environ) -> str:
    """What to add to "cannot reach the cluster" when this process did not send a token: Ray
    reports a refused token as an unreachable cluster."""
    mode = env.get(AUTH_MODE)
    if mode == "token":
        return ""
    if mode is not None:
        return f"; a cluster with token authentication needs {AUTH_MODE}=token (it is {mode!r})"
    return (
        "; a cluster with token authentication needs its token here: "
        f"{TOKEN}=`ray get-auth-token` run on the head node"
    )
