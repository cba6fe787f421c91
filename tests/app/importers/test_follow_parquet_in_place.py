"""--follow beside a TRL completions file written in place: a Parquet file begins with the
magic its footer ends with, so the magic alone is no whole file. Nothing of it is read, told
or counted until its footer is there."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from app.importers.detect import format_of
from app.importers.importer import FileResult, Importer, ImportOptions
from app.importers.trl import TRL
from storage.store import Store
from tests.app.importers.conftest import following, rows


def _completions(n: int) -> bytes:
    """A completions file of `n` rows, as `GRPOTrainer.log` writes it (pandas `to_parquet`)."""
    frame = pd.DataFrame(
        {
            "step": [1] * n,
            "prompt": [[{"role": "user", "content": f"Question {i // 4}?"}] for i in range(n)],
            "completion": [
                [{"role": "assistant", "content": f"<sql>SELECT {i}</sql>"}] for i in range(n)
            ],
            "correctness_reward": [float(i % 2) for i in range(n)],
            "advantage": [0.5 - i % 2 for i in range(n)],
        }
    )
    out = io.BytesIO()
    frame.to_parquet(out)
    return out.getvalue()


def _wait_for(done: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:.0f} s"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("cut", "whole"),
    [
        (lambda data: data[:4], False),  # the leading magic, all a writer has written yet
        (lambda data: data[:4] + b"\0" * 4 + b"PAR1", False),  # a footer of no bytes
        # A footer longer than the file holds before it.
        (lambda data: data[:4] + b"x" * 8 + (9).to_bytes(4, "little") + b"PAR1", False),
        (lambda data: data[:-1], False),
        (lambda data: data, True),
    ],
    ids=["magic-alone", "footer-of-no-bytes", "footer-past-the-file", "cut-short", "whole"],
)
def test_a_parquet_file_is_whole_once_its_footer_fits_in_it(
    tmp_path: Path, cut: Callable[[bytes], bytes], whole: bool
) -> None:
    path = tmp_path / "completions_00001.parquet"
    path.write_bytes(cut(_completions(4)))
    assert TRL().whole(path) is whole


def test_follow_waits_for_the_footer_of_a_parquet_file_written_in_place(
    store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "completions").mkdir(parents=True)
    importer = Importer(store, format_of(out, "trl"), ImportOptions(path=out, name="trl-live"))
    run_id = importer.open()
    results: list[FileResult] = []
    notes: list[str] = []
    data = _completions(8)
    with following(importer, results.append, on_note=notes.append):
        with (out / "completions" / "completions_00001.parquet").open("wb") as f:
            f.write(data[:4])
            f.flush()
            time.sleep(1.0)  # twenty looks at the magic alone
            assert (results, notes) == ([], [])
            assert rows(store, "SELECT count(*) FROM import_files") == [(0,)]
            f.write(data[4:])
        _wait_for(lambda: bool(results), "the whole file's import")
    importer.finish("completed")
    assert [(r.episodes, r.skipped, r.unreadable) for r in results] == [(8, 0, False)]
    assert notes == []
    assert rows(
        store,
        "SELECT rows, episodes, skipped_lines, completed_at IS NOT NULL FROM import_files",
    ) == [(8, 8, 0, 1)]
    assert rows(
        store, "SELECT skipped_lines, finished_episodes FROM runs WHERE id = ?", run_id
    ) == [(0, 8)]
