"""Dashboard settings, passed from `serve()` to the Streamlit process through env vars."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_STORE = "ROLLSCOPE_STORE"
ENV_READ_ONLY = "ROLLSCOPE_READ_ONLY"
ENV_CHECKPOINT_ROOTS = "ROLLSCOPE_CHECKPOINT_ROOTS"
ENV_RAY_ADDRESS = "ROLLSCOPE_RAY_ADDRESS"
ENV_DATASET_ROOTS = "ROLLSCOPE_DATASET_ROOTS"
DEFAULT_STORE = "rollscope.db"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What the dashboard process was started with."""

    store_url: str
    read_only: bool = False
    """No writing control anywhere (Launch, Cancel, and any later one): `--read-only`, or a
    non-loopback address without `--allow-writes` (`serve_mode`)."""
    checkpoint_roots: tuple[Path, ...] = ()
    ray_address: str | None = None
    """A Ray cluster Launch may fan runs out to (`--ray-address`); None offers none."""
    dataset_roots: tuple[Path, ...] = ()
    """Folders Launch may read questions files from (besides the built-in demo)."""

    @property
    def writes_allowed(self) -> bool:
        """Whether a page may offer a control that writes or starts a process."""
        return not self.read_only


@dataclass(frozen=True, slots=True)
class ServeMode:
    """Whether a dashboard about to start may write, and the startup line that says so."""

    read_only: bool
    line: str


def serve_mode(
    host: str,
    *,
    read_only: bool = False,
    allow_writes: bool = False,
    unwritable: str | None = None,
) -> ServeMode:
    """The mode for a bind address: on a non-loopback one, anyone who reaches the port could
    launch runs on this host, so writing controls are off unless `allow_writes` says so.
    `unwritable`: why the store cannot be written from here, if it cannot (then every
    writing control would fail, so none is offered)."""
    if read_only and allow_writes:
        raise ValueError("give --read-only or --allow-writes, not both")
    if read_only:
        return ServeMode(True, f"read-only (--read-only): bound to {host}")
    if unwritable is not None:
        return ServeMode(
            True,
            f"read-only: the store cannot be written here ({unwritable}), so Launch is off; "
            f"bound to {host}",
        )
    if is_loopback(host):
        return ServeMode(False, f"writable: bound to {host}, reachable from this machine only")
    if allow_writes:
        return ServeMode(
            False,
            f"writable (--allow-writes): bound to {host}; anyone who reaches this port can "
            "launch and cancel runs: put it behind authentication",
        )
    return ServeMode(True, f"read-only: bound to {host}; pass --allow-writes to enable Launch")


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (an unknown name is not)."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    if not name:
        return False  # Streamlit binds every interface when no address is given
    try:
        found = socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in found
    )


def to_env(
    store_url: str,
    *,
    read_only: bool = False,
    checkpoint_roots: Sequence[Path] = (),
    ray_address: str | None = None,
    dataset_roots: Sequence[Path] = (),
) -> dict[str, str]:
    """The env vars that carry these settings to the dashboard process."""
    return {
        ENV_STORE: store_url,
        ENV_READ_ONLY: "1" if read_only else "0",
        ENV_CHECKPOINT_ROOTS: _paths(checkpoint_roots),
        ENV_DATASET_ROOTS: _paths(dataset_roots),
        ENV_RAY_ADDRESS: ray_address or "",
    }


def _paths(paths: Sequence[Path]) -> str:
    return os.pathsep.join(str(Path(p).resolve()) for p in paths)


def _read_paths(value: str) -> tuple[Path, ...]:
    return tuple(Path(p).resolve() for p in value.split(os.pathsep) if p.strip())


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings from the environment (defaults: `rollscope.db`, writable, no roots)."""
    env = os.environ if environ is None else environ
    return Settings(
        store_url=env.get(ENV_STORE, "").strip() or DEFAULT_STORE,
        read_only=env.get(ENV_READ_ONLY, "").strip().lower() in _TRUE,
        checkpoint_roots=_read_paths(env.get(ENV_CHECKPOINT_ROOTS, "")),
        dataset_roots=_read_paths(env.get(ENV_DATASET_ROOTS, "")),
        ray_address=env.get(ENV_RAY_ADDRESS, "").strip() or None,
    )
