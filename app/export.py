"""Export a run's episodes with their steps to JSONL or Parquet, streamed, never loaded whole."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage.read_models import EpisodeDetail
from storage.store import Store

_PARQUET_ROWS = 1_000


def _row(detail: EpisodeDetail) -> dict[str, Any]:
    summary = dataclasses.asdict(detail.summary)
    return {
        **summary,
        "gold_sql": detail.gold_sql,
        "seed": detail.seed,
        "progress": detail.progress,
        "operational": detail.operational,
        "error": detail.error,
        "steps": [dataclasses.asdict(s) for s in detail.steps],
    }


def _rows(store: Store, run_id: int) -> Iterator[dict[str, Any]]:
    for detail in store.iter_episode_details(run_id):
        yield _row(detail)


def export_run(store: Store, run_id: int, target: Path, fmt: str) -> int:
    """Write every finished episode of the run to `target`; returns the episode count.

    Writes to a temporary file first, so a failed export leaves no half-written file.
    """
    tmp = target.with_name(f".{target.name}.partial")
    count = 0
    try:
        if fmt == "jsonl":
            with tmp.open("w", encoding="utf-8") as fh:
                for row in _rows(store, run_id):
                    fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                    count += 1
        else:
            count = _write_parquet(_rows(store, run_id), tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _write_parquet(rows: Iterator[dict[str, Any]], path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    count = 0
    chunk: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal writer
        table = pa.Table.from_pylist(chunk)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table.cast(writer.schema))
        chunk.clear()

    try:
        for row in rows:
            row["steps"] = json.dumps(row["steps"], ensure_ascii=False, default=str)
            chunk.append(row)
            count += 1
            if len(chunk) >= _PARQUET_ROWS:
                flush()
        if chunk or writer is None:
            if chunk:
                flush()
            else:
                pq.write_table(pa.table({"id": pa.array([], pa.int64())}), path)
    finally:
        if writer is not None:
            writer.close()
    return count
