"""Export runs' episodes with their steps to one JSONL or Parquet file, streamed, never whole.

JSONL: one JSON object per episode, its steps a list of objects. Parquet: the same columns with
an explicit schema (`app.export_schema`), the steps a `list<struct>` column. The CLI's `export`
and the dashboard call `export_episodes`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, Literal

from app.export_schema import Beside, episode_row, episode_schema
from storage.read_models import EpisodeFilter
from storage.store import Store

ExportFormat = Literal["jsonl", "parquet"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("jsonl", "parquet")

_READ_BATCH = 50
"""Episodes read from the store per query. Export memory is mostly these and the next two
buffers, whatever the run's length (tests/benchmarks/bench_export.py measures it)."""
_ARROW_CHUNK_ROWS = 25
"""Episodes turned into one Arrow batch at a time (their dicts are the only other copy)."""
_ROW_GROUP_BYTES = 16 << 20
"""Arrow bytes buffered before a Parquet row group is written."""
_ROW_GROUP_ROWS = 5_000
"""Rows per row group at most, for runs of tiny episodes."""


def export_episodes(
    store: Store,
    run_ids: Sequence[int],
    target: str | os.PathLike[str] | BinaryIO,
    fmt: ExportFormat,
    episode_filter: EpisodeFilter | None = None,
) -> int:
    """Write the finished episodes of the runs (one run after another, each in id order; only
    those `episode_filter` matches, when given) to `target`; returns the episode count.

    A path is written atomically: a temporary file beside it, renamed over it at the end, so a
    failure leaves neither a partial file nor the temporary one. A binary stream (the
    dashboard's download buffer) is written as is and left open.
    ValueError, before anything is written, for an unknown format or run.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    for run_id in run_ids:
        if store.get_run(run_id) is None:
            raise ValueError(f"no run with id {run_id} in this store")
    rows = _rows(store, run_ids, episode_filter)
    write = _write_jsonl if fmt == "jsonl" else _write_parquet
    if isinstance(target, str | os.PathLike):
        with _atomic(Path(target)) as fh:
            return write(rows, fh)
    return write(rows, target)


def default_output(run_names: Sequence[str], fmt: ExportFormat) -> Path:
    """`NAME.FORMAT` for one run (characters unsafe in a file name as `_`), else
    `rollscope-export.FORMAT`."""
    if len(run_names) != 1:
        return Path(f"rollscope-export.{fmt}")
    safe = re.sub(r"[^\w.-]", "_", run_names[0]).lstrip(".") or "run"
    return Path(f"{safe}.{fmt}")


def _rows(
    store: Store, run_ids: Sequence[int], flt: EpisodeFilter | None
) -> Iterator[dict[str, Any]]:
    for run_id in run_ids:
        if flt is not None and flt.run_ids and run_id not in flt.run_ids:
            continue  # the filter's runs and the asked runs combine with AND, as filters do
        details = store.iter_episode_details(run_id, flt=flt, batch=_READ_BATCH)
        while chunk := list(islice(details, _READ_BATCH)):
            ids = [d.summary.id for d in chunk]
            origins, replaced = store.episode_origins(ids), store.replaced_among(ids)
            for detail in chunk:
                eid = detail.summary.id
                yield episode_row(detail, Beside(origins.get(eid), eid in replaced))


@contextmanager
def _atomic(target: Path) -> Iterator[BinaryIO]:
    """A file beside `target` that replaces it on success and is removed on any failure."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    # os.open with 0o666 (not mkstemp's 0o600): the result gets the user's umask, like any file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _write_jsonl(rows: Iterable[dict[str, Any]], fh: BinaryIO) -> int:
    count = 0
    for row in rows:
        line = json.dumps(row, ensure_ascii=False, default=_json_default)
        fh.write(line.encode("utf-8") + b"\n")
        count += 1
    return count


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _write_parquet(rows: Iterable[dict[str, Any]], fh: BinaryIO) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = episode_schema()
    count = buffered = 0
    pending: list[pa.RecordBatch] = []
    # zstd: prompts repeat the system text and the episode so far; every Parquet reader has it.
    with pq.ParquetWriter(fh, schema, compression="zstd") as writer:
        it = iter(rows)
        while chunk := list(islice(it, _ARROW_CHUNK_ROWS)):
            batch = pa.RecordBatch.from_pylist(chunk, schema=schema)
            pending.append(batch)
            count += len(chunk)
            buffered += batch.nbytes
            rows_pending = sum(b.num_rows for b in pending)
            if buffered >= _ROW_GROUP_BYTES or rows_pending >= _ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=rows_pending)
                pending.clear()
                buffered = 0
        if pending:
            table = pa.Table.from_batches(pending)
            writer.write_table(table, row_group_size=table.num_rows)
    return count
