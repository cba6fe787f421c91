"""The progress bar of `rollscope import` on a terminal: the share of the files' bytes read
(a file being read counted by the share of its rows written), the episodes written so far
and their rate, and the time left.

A bar only where a person watches (stderr a terminal, not --quiet, not --follow, which has no
end): a log or a pipe gets the files' lines alone, as before. The bar goes when the import
ends; the summary stays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from app.cli.output import err
from app.plural import counted


class ImportProgress:
    """Advanced by the episodes of each batch written and by each file once it is in."""

    def __init__(self, name: str, sizes: dict[str, int], *, shown: bool) -> None:
        """`sizes`: the bytes of each file to import, by its path under the root (a result's
        `path`)."""
        self.sizes = sizes
        self.shares: dict[str, float] = {}
        """The share of each file's rows read (1 once it is read whole)."""
        self.done = 0.0
        """The bytes read: each file's size by its share."""
        self.episodes = 0
        self.files = 0
        self._began = time.monotonic()
        self._progress = Progress(
            TextColumn("importing {task.description}", markup=False),  # a run's name: text
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[counts]}", markup=False),
            TimeRemainingColumn(),
            console=err,
            transient=True,
            disable=not shown,
        )
        self._task = self._progress.add_task(
            repr(name), total=max(sum(sizes.values()), 1), counts=self._counts()
        )

    def __enter__(self) -> ImportProgress:
        self._progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._progress.stop()

    def written(self, episodes: int, path: str, share: float) -> None:
        """A batch of `episodes` is in the store, the last of them from the file at `path`,
        `share` of whose rows are read: one large file moves the bar as it is read."""
        self.episodes += episodes
        self._read_to(path, share)

    def file_done(self, path: str) -> None:
        """The file at `path` (under the root) is read whole."""
        self.files += 1
        self._read_to(path, 1.0)

    def _read_to(self, path: str, share: float) -> None:
        before = self.shares.get(path, 0.0)
        if share > before:
            self.shares[path] = share
            self.done += self.sizes.get(path, 0) * (share - before)
        self._progress.update(self._task, completed=self.done, counts=self._counts())

    def _counts(self) -> str:
        seconds = time.monotonic() - self._began
        rate = f" · {self.episodes / seconds:,.0f}/s" if self.episodes and seconds > 0 else ""
        return (
            f"{self.files:,}/{counted(len(self.sizes), 'file')} · "
            f"{counted(self.episodes, 'episode')}{rate}"
        )


def file_sizes(paths: list[Path], relative: Callable[[Path], str]) -> dict[str, int]:
    """Each file's bytes by its path under the root (0 for one gone since it was listed)."""
    sizes = {}
    for path in paths:
        try:
            sizes[relative(path)] = path.stat().st_size
        except OSError:
            sizes[relative(path)] = 0
    return sizes
