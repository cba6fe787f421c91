"""Checkpoint identity without loading it: a short fingerprint of its config and weights."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

from rollout_core.errors import RollscopeError


# Weight files up to this size are hashed whole (a 1M-parameter model is 4 MB, about 10 ms);
# larger ones are hashed by sampled blocks so fingerprinting a 15 GB checkpoint stays fast.
class CheckpointError(RollscopeError, FileNotFoundError):
    """A path that is not a usable checkpoint directory."""


_FULL_HASH_LIMIT = 64 * 1024 * 1024
_SAMPLE_BLOCKS = 32
_SAMPLE_BLOCK_BYTES = 64 * 1024


def fingerprint_checkpoint(path: Path | str) -> str:
    """A 12-hex-digit hash of a checkpoint's config.json and weights, stable across copies."""
    root = Path(path)
    config = root / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{config} not found; pass a Hugging Face checkpoint directory")
    digest = hashlib.sha256(config.read_bytes())
    weights = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
    if not weights:
        raise FileNotFoundError(
            f"no *.safetensors or *.bin weights in {root}; save the model there"
        )
    for file in weights:
        digest.update(file.name.encode())
        _hash_weights(file, digest)
    return digest.hexdigest()[:12]


def _hash_weights(file: Path, digest: Any) -> None:
    """Feed the size, the safetensors header and the tensor bytes (or samples of them)."""
    size = file.stat().st_size
    digest.update(struct.pack("<Q", size))
    with file.open("rb") as handle:
        if size <= _FULL_HASH_LIMIT:
            digest.update(handle.read())
            return
        if file.suffix == ".safetensors":
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = handle.read(header_len)
            digest.update(header)
        stride = size // _SAMPLE_BLOCKS
        for block in range(_SAMPLE_BLOCKS):
            handle.seek(block * stride)
            digest.update(handle.read(_SAMPLE_BLOCK_BYTES))


def check_checkpoint_dir(path: Path | str) -> Path:
    """The checkpoint directory, resolved; CheckpointError in one line when it is not one."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise CheckpointError(
            f"checkpoint not found: {root} (pass --policy hf:DIR with a model dir)"
        )
    if not (root / "config.json").is_file():
        raise CheckpointError(f"{root} is not a transformers checkpoint: it has no config.json")
    weights = [
        *root.glob("*.safetensors"),
        *root.glob("*.bin"),
        *root.glob("*.safetensors.index.json"),
    ]
    if not weights:
        raise CheckpointError(
            f"{root} has no weights (*.safetensors or *.bin); was it fully saved?"
        )
    return root
