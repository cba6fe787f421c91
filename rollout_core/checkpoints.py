"""Checkpoint identity without loading it: a short fingerprint of its config and weights."""

from __future__ import annotations

import hashlib
from pathlib import Path

_HEAD_BYTES = (
    1 << 20
)  # hash the first MiB of each weights file: fast, and differs per training step


def fingerprint_checkpoint(path: str | Path) -> str:
    """12 hex digits over config.json and each weights file's size and first MiB."""
    root = Path(path)
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    weights = sorted([*root.glob("*.safetensors"), *root.glob("*.bin")])
    for file in weights:
        digest.update(file.name.encode())
        digest.update(str(file.stat().st_size).encode())
        with file.open("rb") as fh:
            digest.update(fh.read(_HEAD_BYTES))
    return digest.hexdigest()[:12]
