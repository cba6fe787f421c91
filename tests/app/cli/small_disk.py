"""A really small disk for tests: a tmpfs of a given size, in a private mount namespace.

A store fills it for real ("database or disk is full"), as tests/readonly_mount.py makes a
file system read-only for real. The mount vanishes with the command; `--map-root-user` lets it
work without root where user namespaces are allowed.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

_PREFIXES = (["unshare", "--mount", "--map-root-user"], ["unshare", "--mount"])
# $1 = size, $2 = mount point, the rest = the command run with the tmpfs mounted there.
_SCRIPT = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'


@functools.cache
def _working_prefix() -> tuple[list[str] | None, str]:
    """The first unshare prefix that can mount a tmpfs and grow it, and why none could."""
    reasons = []
    with tempfile.TemporaryDirectory() as view:
        probe = ["sh", "-c", 'mount -o remount,size=2m "$0"', view]
        for prefix in _PREFIXES:
            try:
                res = subprocess.run(
                    [*prefix, "sh", "-c", _SCRIPT, "sh", "1m", view, *probe],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                reasons.append(f"{' '.join(prefix)}: {exc}")
                continue
            if res.returncode == 0:
                return prefix, ""
            reasons.append(f"{' '.join(prefix)}: {res.stderr.strip() or res.returncode}")
    return None, "; ".join(reasons)


def run_on_small_disk(
    size: str, disk: Path, command: Sequence[str | Path], *, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `command` with a tmpfs of `size` (e.g. `1m`) mounted at `disk`, an empty folder;
    the command may grow it with `mount -o remount,size=64m DISK`."""
    prefix, why = _working_prefix()
    if prefix is None:
        pytest.skip(f"cannot mount a small tmpfs here: neither unshare prefix may ({why})")
    return subprocess.run(
        [*prefix, "sh", "-c", _SCRIPT, "sh", size, str(disk), *map(str, command)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
