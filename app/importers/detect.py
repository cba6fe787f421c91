"""Which format a path holds, from its layout (folder and file names), else from the keys of
its first row; refused in one line naming what was looked for."""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.importers.messages import Messages
from app.importers.rllm import RLLM
from app.importers.skyrl import SkyRL
from app.importers.source import UTF8_BOM, Format
from app.importers.trl import TRL
from app.importers.verifiers import RESULTS, Verifiers
from app.importers.verl import Verl
from app.plural import counted
from rollout_core.errors import RollscopeError

FORMATS: dict[str, Format] = {
    f.name: f for f in (TRL(), Verl(), SkyRL(), RLLM(), Verifiers(), Messages())
}
"""Every format `rollscope import` reads, by its `--format` name."""

_SKYRL_DIR = re.compile(r"global_step_\d+_evals\Z")
_ROLLOUT_SUFFIXES = (".jsonl", ".parquet")
"""What another format's rollout files at a folder's top are named."""
_RLLM_DIR = re.compile(r"\w+?_step_\d+_epoch_\d+\Z")
LOOKED_FOR = (
    "TRL completions/completions_*.parquet, verl <step>.jsonl, SkyRL dumped_evals/, rLLM "
    "episodes/, verifiers results.jsonl or traces.jsonl, or chat-log .jsonl (messages)"
)


def format_label(name: str) -> str:
    """How people call a format stored by its `--format` name (`chat log` for `messages`)."""
    found = FORMATS.get(name)
    return found.label if found is not None else name


class FormatError(RollscopeError, ValueError):
    """The path holds no format rollscope reads, or not the one named."""


def detect(path: Path) -> Format | None:
    """The format of a file or folder; None when nothing in it says."""
    if path.is_file():
        return _file_format(path)
    if not path.is_dir():
        return None
    if (path / "completions").is_dir() or any(path.glob("completions_*.parquet")):
        return FORMATS["trl"]
    if (
        (path / "dumped_evals").is_dir()
        or path.name == "dumped_evals"
        or _SKYRL_DIR.match(path.name)
    ):
        return FORMATS["skyrl"]
    if (
        (path / "episodes").is_dir()
        or _RLLM_DIR.match(path.name)
        or (path.name == "episodes" and any(_RLLM_DIR.match(d.name) for d in path.iterdir()))
    ):
        return FORMATS["rllm"]
    if any((path / name).is_file() or any(path.rglob(name)) for name in RESULTS):
        return FORMATS["verifiers"]
    jsonl = sorted(path.glob("*.jsonl"))
    if jsonl and all(p.stem.isdecimal() for p in jsonl):
        return FORMATS["verl"]
    for p in jsonl:
        if (found := _sniff(p)) is not None:
            return found
    return None


def other_formats_files(fmt: Format, root: Path) -> str | None:
    """The files at the folder's top that hold another format's rollouts, which `fmt` does
    not read (a folder of several formats), in one line; None for none."""
    if not root.is_dir():
        return None
    read = set(fmt.files(root))
    found = [
        (p.name, other.label)
        for p in sorted(root.iterdir())
        if p.suffix in _ROLLOUT_SUFFIXES and p not in read and p.is_file()
        and (other := _file_format(p)) is not None and other.name != fmt.name
    ]  # fmt: skip
    if not found:
        return None
    shown = ", ".join(f"{name} ({label})" for name, label in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"read the {fmt.label} files only, not {counted(len(found), 'file')} of another format "
        f"({shown}{more}); import each by its path, under another --name, to read it"
    )


def _file_format(path: Path) -> Format | None:
    if path.suffix == ".parquet":
        return FORMATS["trl"]
    if path.suffix == ".json":
        return FORMATS["rllm"]
    if path.name in RESULTS:
        return FORMATS["verifiers"]
    if _SKYRL_DIR.match(path.parent.name):
        return FORMATS["skyrl"]
    if path.suffix == ".jsonl" and path.stem.isdecimal():
        return FORMATS["verl"]
    return _sniff(path)


def _sniff(path: Path) -> Format | None:
    """The format whose fields the file's first row has."""
    try:
        with path.open("rb") as f:
            first = next((line for line in f if line.strip()), b"").removeprefix(UTF8_BOM)
        keys = set(json.loads(first.decode("utf-8", errors="replace")))
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    if "messages" in keys:
        return FORMATS["messages"]
    if "input_prompt" in keys:
        return FORMATS["skyrl"]
    if {"input", "output"} <= keys:
        return FORMATS["verl"]
    if "example_id" in keys or {"prompt", "completion"} <= keys or "traces" in keys:
        return FORMATS["verifiers"]
    if "trajectories" in keys:
        return FORMATS["rllm"]
    return None


def format_of(path: Path, name: str) -> Format:
    """The format to read `path` with: `name`, or the detected one for `auto`."""
    if name != "auto" and name not in FORMATS:
        raise FormatError(f"unknown format {name!r}; use one of auto, {', '.join(FORMATS)}")
    if not path.exists():
        raise FormatError(f"{path} does not exist; give the folder or file a trainer wrote")
    if not path.is_file() and not path.is_dir():
        # A pipe (`<(zcat ...)`) or a device: an import reads its files again to find what
        # is new, so it takes only files it can.
        raise FormatError(
            f"{path} is not a file or folder (a pipe?); write the rollouts to a file and "
            "import that"
        )
    if name != "auto":
        return FORMATS[name]
    found = detect(path)
    if found is None:
        raise FormatError(
            f"cannot tell the format of {path}: found none of {LOOKED_FOR}; name it with --format"
        )
    return found
