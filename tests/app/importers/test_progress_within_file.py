"""`rollscope import`'s progress bar moves while one large file is read, not only as each file
ends: the importer tells each batch written with its file and the share of its rows read."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.import_progress import ImportProgress, file_sizes
from app.importers import importer as importer_module
from app.importers.detect import format_of
from app.importers.importer import Importer, ImportOptions
from storage.store import Store
from tests.app.importers.test_follow_and_stop import write_step


def test_each_batch_tells_its_file_and_the_share_of_its_rows_read(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", 100)
    dump = tmp_path / "dump"
    write_step(dump, 1, 250)
    write_step(dump, 2, 40)
    fmt = format_of(dump, "verl")
    files = fmt.files(dump)
    told: list[tuple[int, str, float]] = []
    completed: list[float] = []
    importer = Importer(store, fmt, ImportOptions(path=dump, name="v"))
    importer.open()
    progress = ImportProgress("v", file_sizes(files, importer.relative), shown=False)

    def on_written(episodes: int, path: str, share: float) -> None:
        told.append((episodes, path, share))
        progress.written(episodes, path, share)
        completed.append(progress._progress.tasks[0].completed)

    importer.on_written = on_written
    for result in importer.import_files(files):
        progress.file_done(result.path)
    importer.finish("completed")
    # Two full batches inside the first file, then the rest of it, then the second file.
    assert told == [
        (100, "1.jsonl", 0.4),
        (100, "1.jsonl", 0.8),
        (50, "1.jsonl", 1.0),
        (40, "2.jsonl", 1.0),
    ]
    first, second = (f.stat().st_size for f in files)
    assert completed == pytest.approx([0.4 * first, 0.8 * first, first, first + second])
    assert progress._progress.tasks[0].completed == first + second
    assert progress.episodes == 290 and progress.files == 2


def test_a_batch_inside_one_file_moves_the_bar_by_that_file_s_share() -> None:
    progress = ImportProgress("v", {"a.jsonl": 1000, "b.jsonl": 3000}, shown=False)

    def completed() -> float:
        return progress._progress.tasks[0].completed

    progress.written(10, "a.jsonl", 0.5)
    assert completed() == 500
    progress.file_done("a.jsonl")
    assert completed() == 1000
    progress.written(10, "b.jsonl", 0.25)
    assert completed() == 1750
    progress.file_done("b.jsonl")
    assert completed() == 4000
