"""Dashboard settings, passed from `serve()` to the Streamlit process through env vars."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_STORE = "ROLLSCOPE_STORE"
ENV_READ_ONLY = "ROLLSCOPE_READ_ONLY"
ENV_CHECKPOINT_ROOTS = "ROLLSCOPE_CHECKPOINT_ROOTS"
ENV_DATASET_ROOTS = "ROLLSCOPE_DATASET_ROOTS"
DEFAULT_STORE = "rollscope.db"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What the dashboard process was started with."""

    store_url: str
    read_only: bool = False
    checkpoint_roots: tuple[Path, ...] = ()
    dataset_roots: tuple[Path, ...] = ()
    """Folders Launch may read questions files from (besides the built-in demo)."""


def to_env(
    store_url: str,
    *,
    read_only: bool = False,
    checkpoint_roots: Sequence[Path] = (),
    dataset_roots: Sequence[Path] = (),
) -> dict[str, str]:
    """The env vars that carry these settings to the dashboard process."""
    return {
        ENV_STORE: store_url,
        ENV_READ_ONLY: "1" if read_only else "0",
        ENV_CHECKPOINT_ROOTS: _paths(checkpoint_roots),
        ENV_DATASET_ROOTS: _paths(dataset_roots),
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
    )
