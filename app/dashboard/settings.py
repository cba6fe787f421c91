"""Dashboard settings, passed from `serve()` to the Streamlit process through env vars."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_STORE = "ROLLSCOPE_STORE"
ENV_READ_ONLY = "ROLLSCOPE_READ_ONLY"
ENV_CHECKPOINT_ROOTS = "ROLLSCOPE_CHECKPOINT_ROOTS"
ENV_RAY_ADDRESS = "ROLLSCOPE_RAY_ADDRESS"
DEFAULT_STORE = "rollscope.db"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What the dashboard process was started with."""

    store_url: str
    read_only: bool = False
    checkpoint_roots: tuple[Path, ...] = ()
    ray_address: str | None = None
    """A Ray cluster Launch may fan runs out to (`--ray-address`); None offers none."""


def to_env(
    store_url: str,
    *,
    read_only: bool = False,
    checkpoint_roots: Sequence[Path] = (),
    ray_address: str | None = None,
) -> dict[str, str]:
    """The env vars that carry these settings to the dashboard process."""
    return {
        ENV_STORE: store_url,
        ENV_READ_ONLY: "1" if read_only else "0",
        ENV_CHECKPOINT_ROOTS: os.pathsep.join(str(Path(p).resolve()) for p in checkpoint_roots),
        ENV_RAY_ADDRESS: ray_address or "",
    }


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings from the environment (defaults: `rollscope.db`, writable, no roots)."""
    env = os.environ if environ is None else environ
    roots = tuple(
        Path(p).resolve() for p in env.get(ENV_CHECKPOINT_ROOTS, "").split(os.pathsep) if p.strip()
    )
    return Settings(
        store_url=env.get(ENV_STORE, "").strip() or DEFAULT_STORE,
        read_only=env.get(ENV_READ_ONLY, "").strip().lower() in _TRUE,
        checkpoint_roots=roots,
        ray_address=env.get(ENV_RAY_ADDRESS, "").strip() or None,
    )
