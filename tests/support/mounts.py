"""File systems that fail for real, each in a private mount namespace: a read-only one (a
read-only bind mount) and a really small disk (a tmpfs of a given size).

Tests run as root here, and chmod does not stop root from writing; a read-only mount does
(EROFS), and a full tmpfs makes a store fail with "database or disk is full". `unshare
--mount` gives the command its own mount namespace, so the mount vanishes with the command and
nothing leaks into the test session; `--map-root-user` lets it work without root where user
namespaces are allowed.
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
_READ_ONLY = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'
# $1 = size, $2 = mount point, the rest = the command run with the tmpfs mounted there.
_SMALL_DISK = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'


def _first_working(
    script: str, first: str, view: str, probe: list[str]
) -> tuple[list[str] | None, str]:
    """The first unshare prefix under which `script` (given `first` and `view`) lets `probe`
    succeed, and why none did."""
    reasons = []
    for prefix in _PREFIXES:
        try:
            res = subprocess.run(
                [*prefix, "sh", "-c", script, "sh", first, view, *probe],
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


@functools.cache
def _read_only_prefix() -> tuple[list[str] | None, str]:
    """The first prefix that makes a mount writes bounce off, and why none did."""
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as view:
        probe = ["sh", "-c", 'touch "$0/.probe" 2>/dev/null && exit 1 || exit 0', view]
        return _first_working(_READ_ONLY, src, view, probe)


@functools.cache
def _small_disk_prefix() -> tuple[list[str] | None, str]:
    """The first prefix that can mount a tmpfs and grow it, and why none could."""
    with tempfile.TemporaryDirectory() as view:
        probe = ["sh", "-c", 'mount -o remount,size=2m "$0"', view]
        return _first_working(_SMALL_DISK, "1m", view, probe)


def _run(
    prefix: list[str], script: str, first: str, view: Path, command: Sequence[str | Path],
    cwd: Path, timeout: float,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [*prefix, "sh", "-c", script, "sh", first, str(view), *map(str, command)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def run_read_only(
    src: Path, view: Path, command: Sequence[str | Path], *, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `command` with `src` mounted read-only at `view` (an existing empty folder)."""
    prefix, why = _read_only_prefix()
    if prefix is None:
        pytest.skip(
            "cannot make a read-only file system here: neither `unshare --mount "
            f"--map-root-user` nor `unshare --mount` may bind-mount ({why})"
        )
    return _run(prefix, _READ_ONLY, str(src), view, command, cwd, timeout)


def run_on_small_disk(
    size: str, disk: Path, command: Sequence[str | Path], *, cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `command` with a tmpfs of `size` (e.g. `1m`) mounted at `disk`, an empty folder;
    the command may grow it with `mount -o remount,size=64m DISK`."""
    prefix, why = _small_disk_prefix()
    if prefix is None:
        pytest.skip(f"cannot mount a small tmpfs here: neither unshare prefix may ({why})")
    return _run(prefix, _SMALL_DISK, size, disk, command, cwd, timeout)
