"""`rollscope import --follow`: import each new file of a training run as it appears.

A file is taken once it is whole: its writer's end is there (a JSONL file ends with a newline,
a Parquet file with its footer, an rLLM episode parses) and its size and time have not changed
over one look. A JSONL file its writer keeps appending to (vf-eval's `traces.jsonl`, a long
step) is taken once it has been growing for `GROWING_SECONDS`, up to its last newline (a writer
whose writes end within a line is still writing that line), and read on from where its last
reading ended. The files a look finds ready are imported together, after the questions a
rollscope run has played since are matched (as at `Importer.open`). The run stays `running`,
its heartbeat fresh, so Runs and Training show it live; `stop` (which Ctrl-C sets) ends the
loop between two rows, never inside a write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.importers.importer import FileResult, Importer, whole_lines_end
from app.importers.source import JsonLines

POLL_SECONDS = 1.0
BEAT_SECONDS = 5.0
PAUSE_SLICE_SECONDS = 0.05
"""How soon a pause between looks sees a stop."""
GROWING_SECONDS = 2.0
"""How long a file may keep growing before what it holds so far is taken: what a growing file
gains shows in the dashboard within about this and one poll."""


def follow(
    importer: Importer,
    *,
    on_file: Callable[[FileResult], None],
    on_note: Callable[[str], None],
    on_look: Callable[[], None] = lambda: None,
    poll: float = POLL_SECONDS,
    growing: float = GROWING_SECONDS,
    stop: threading.Event | None = None,
) -> None:
    """Import new whole files until `stop` (by default the importer's own) is set;
    `on_look` after each look that imported some."""
    stop = stop or importer.stop
    seen: dict[Path, tuple[int, int]] = {}
    done: dict[Path, tuple[int, int]] = {}
    changed: dict[Path, float] = {}
    """When a file was first seen changed since it was last taken."""
    grown: set[Path] = set()
    """The files seen to change since they were last taken (not only new)."""
    lines_taken: dict[Path, int] = {}
    """Where the lines taken of a file still being written ended (its last line unfinished)."""
    beat = time.monotonic()
    while not stop.is_set():
        ready: dict[Path, tuple[int, int]] = {}
        for path in importer.files():
            try:
                stat = path.stat()
            except OSError:
                continue  # gone since the listing
            mark = (stat.st_size, stat.st_mtime_ns)
            if done.get(path) == mark:
                continue
            now = time.monotonic()
            if seen.get(path) != mark:
                if path in seen:
                    grown.add(path)
                seen[path] = mark  # new or still growing: looked at again next time
                if now - changed.setdefault(path, now) < growing:
                    continue
            # A file that cannot be read is taken too: the import tells it, and counts it.
            if importer.fmt.whole(path) or _cannot_read(path):
                ready[path] = mark
                lines_taken.pop(path, None)
            elif path in grown and now - changed[path] >= growing:
                # Its whole lines so far: a writer whose writes end within a line may never
                # leave the file ending with a newline while it writes.
                end = _new_lines_end(importer, path, lines_taken.get(path, 0))
                if end is not None:
                    ready[path], lines_taken[path] = mark, end
        if ready and not stop.is_set():
            importer.match_new_questions()
            # Together: a step's many one-episode files (rLLM's) go in a few transactions.
            try:
                results = importer.import_files(ready, whole_lines=True)
                for path, result in zip(ready, results, strict=True):
                    done[path] = ready[path]
                    changed.pop(path, None)
                    grown.discard(path)
                    on_file(result)  # one read before too: the summary counts it as such
            except FileNotFoundError as exc:
                # The files after it are looked at again next time.
                gone = Path(exc.filename).name if exc.filename else "a file"
                on_note(f"{gone} went away while it was read; left out")
            on_look()
            beat = time.monotonic()
        if time.monotonic() - beat >= BEAT_SECONDS:
            importer.heartbeat()
            beat = time.monotonic()
        pause(stop, poll)


def _cannot_read(path: Path) -> bool:
    """Whether reading the file fails (an I/O error, no permission), not for its being gone."""
    try:
        with path.open("rb") as f:
            f.read(1)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


def _new_lines_end(importer: Importer, path: Path, taken: int) -> int | None:
    """Where the whole lines of a JSONL file end, when not where those taken before ended
    (None: no whole line since, or a format whose files grow by no lines)."""
    if not isinstance(importer.fmt, JsonLines):
        return None
    try:
        end = whole_lines_end(path, path.stat().st_size)
    except OSError:
        return None  # gone since the listing
    return end if end not in (0, taken) else None


def pause(stop: threading.Event, seconds: float) -> None:
    """Sleep up to `seconds`, less once `stop` is set. Not `stop.wait`: the Ctrl-C handler that
    sets `stop` runs on this thread, and would wait forever for the lock `wait` holds."""
    end = time.monotonic() + seconds
    while not stop.is_set() and (left := end - time.monotonic()) > 0:
        time.sleep(min(left, PAUSE_SLICE_SECONDS))
