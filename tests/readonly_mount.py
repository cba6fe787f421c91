"""A truly read-only file system for tests: a read-only bind mount in a private mount namespace.

Tests run as root here, and chmod does not stop root from writing; a read-only mount does
(EROFS). `unshare --mount` gives the command its own mount namespace, so the mount vanishes
with the command and nothing leaks into the test session; `--map-root-user` lets it work
without root where user namespaces are allowed.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

_PREFIXES = (["unshare", "--mount", "--map-root-user"], ["unshare", "--mount"])
# $1 = source folder, $2 = mount point, the rest = the command run with $2 read-only.
_SCRIPT = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'


@functools.cache
def _working_prefix() -> tuple[list[str] | None, str]:
    """The first unshare prefix that makes a mount writes bounce off, and why none did."""
    reasons = []
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as view:
        probe = ["sh", "-c", 'touch "$0/.probe" 2>/dev/null && exit 1 || exit 0', view]
        for prefix in _PREFIXES:
            try:
                res = subprocess.run(
                    [*prefix, "sh", "-c", _SCRIPT, "sh", src, view, *probe],
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


def run_read_only(
    src: Path, view: Path, command: Sequence[str | Path], *, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `command` with `src` mounted read-only at `view` (an existing empty folder)."""
    prefix, why = _working_prefix()
    if prefix is None:
        pytest.skip(
            "cannot make a read-only file system here: neither `unshare --mount "
            f"--map-root-user` nor `unshare --mount` may bind-mount ({why})"
        )
    return subprocess.run(
        [*prefix, "sh", "-c", _SCRIPT, "sh", str(src), str(view), *map(str, command)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
