"""--follow beside a writer whose writes end within a line (a copy, a writer that buffers
bytes, not lines): while it writes, its file never ends with a newline. Once it has been
growing a while, its whole lines so far come in, each reading on from where the last ended,
and the line still being written waits for its newline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from app.importers.detect import format_of
from app.importers.importer import FileResult, Importer, ImportOptions
from storage.store import Store
from tests.app.importers.conftest import following, rows
from tests.app.importers.writers import sql_prompt, sql_response

LINES = 400


def _lines() -> list[bytes]:
    """verl's rollout lines (`RayPPOTrainer._dump_generations`), one a rollout."""
    return [
        json.dumps(
            {
                "input": sql_prompt(f"Question {i % 7}?"),
                "output": sql_response([(f"<solution>SELECT {i}</solution>", None)]),
                "gts": "",
                "score": float(i % 2),
                "step": 1,
            }
        ).encode()
        + b"\n"
        for i in range(LINES)
    ]


def _wait_for(done: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:.0f} s"
        time.sleep(0.05)


def test_follow_takes_the_whole_lines_of_a_file_whose_writes_end_within_a_line(
    store: Store, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    lines = _lines()
    data = b"".join(lines)
    # Each write ends halfway through a line.
    starts = [sum(len(line) for line in lines[:i]) for i in range(LINES)]
    cuts = [start + len(line) // 2 for start, line in zip(starts, lines, strict=True)]
    importer = Importer(store, format_of(dump, "verl"), ImportOptions(path=dump, name="live"))
    importer.open()
    results: list[FileResult] = []
    notes: list[str] = []

    def episodes() -> int:
        return int(rows(store, "SELECT count(*) FROM episodes")[0][0])

    with following(importer, results.append, on_note=notes.append, growing=0.3):
        with (dump / "1.jsonl").open("wb") as f:
            written = 0
            for cut in cuts:
                f.write(data[written:cut])
                f.flush()
                written = cut
                if episodes():
                    break  # lines came in while the file grew
                time.sleep(0.05)
            assert episodes(), "no line came in while the file grew"
            f.write(data[written : cuts[-1]])
            f.flush()
            # Its last line unfinished, every line before it comes in.
            _wait_for(lambda: episodes() == LINES - 1, "the whole lines' import")
            f.write(data[cuts[-1] :])
        _wait_for(lambda: episodes() == LINES, "the last line's import")
    importer.finish("completed")
    # Each reading read on from the last one's end: no line was read twice, or left noted.
    assert all(r.known == 0 and r.skipped == 0 and not r.pending for r in results), results
    assert notes == []
    assert rows(store, "SELECT count(*), count(DISTINCT line), min(line), max(line) "
                "FROM episode_sources") == [(LINES, LINES, 1, LINES)]  # fmt: skip
    assert rows(
        store, "SELECT count(*), sum(completed_at IS NULL), sum(skipped_lines) FROM import_files"
    ) == [(len(results), 0, 0)]
