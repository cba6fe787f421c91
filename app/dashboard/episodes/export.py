"""Download the episodes a filter matches, through the same code as `rollscope export`.

The file is written only when the button is pressed (a deferred download): into an anonymous
temporary file first, so the export streams through bounded memory as the CLI's does, then
handed to Streamlit, which serves its bytes from memory. That last copy is why a download is
capped; past the cap the page names the CLI command instead.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial

import streamlit as st

from app.dashboard import data
from app.store_url import shown_url
from storage.read_models import EpisodeFilter

DOWNLOAD_CAP = 5000
"""Most episodes one download holds: at ~10-100 kB an episode (steps with their prompts), up to
a few hundred MB in the dashboard's memory until the browser has it."""
_MIME = {"jsonl": "application/jsonl", "parquet": "application/vnd.apache.parquet"}


def _write(url: str, run_ids: Sequence[int], fmt: str, flt: EpisodeFilter) -> bytes:
    from app.export import export_episodes  # pyarrow loads on the first export, not per page

    store = data.get_store(url)
    if not run_ids:  # no run filter: every run's, oldest first, as `rollscope export --all`
        run_ids = sorted(r.id for r in store.list_runs(limit=sys.maxsize))
    with tempfile.TemporaryFile() as out:
        export_episodes(store, run_ids, out, fmt, flt)  # type: ignore[arg-type]
        out.seek(0)
        return out.read()


def file_name(run_names: Sequence[str], fmt: str) -> str:
    """`NAME-episodes.FORMAT` for one run, else `rollscope-episodes.FORMAT`."""
    from app.export import default_output

    stem = default_output(run_names, fmt).stem  # type: ignore[arg-type]
    return f"{stem}-episodes.{fmt}" if len(run_names) == 1 else f"rollscope-episodes.{fmt}"


def export_menu(
    flt: EpisodeFilter, total: int | None, runs: dict[int, str], *, at_least: bool = False
) -> None:
    """An "Export" menu: the filtered episodes (with their steps) as JSONL or Parquet.
    `at_least`: `total` is where counting stopped, not the whole count."""
    run_ids = list(flt.run_ids)  # none: every run's, past the runs the page lists too
    names = [runs[i] for i in run_ids if i in runs]
    too_many = total is not None and (total > DOWNLOAD_CAP or at_least)
    shown = "" if total is None else f"{total:,}{'+' if at_least else ''} "
    with st.popover("Export", icon=":material/download:"):
        st.caption(
            f"The {shown}episodes these filters match, each with "
            "its steps, written as `rollscope export` writes them."
        )
        if too_many:
            refs = " ".join(f"--run {i}" for i in run_ids) or "--all"
            st.caption(
                f"More than {DOWNLOAD_CAP} episodes: narrow the filters, or export whole runs "
                "from a shell:"
            )
            store = shlex.quote(shown_url(data.settings().store_url))
            st.code(f"rollscope export {refs} --format parquet --store {store}")
        url = data.settings().store_url
        for fmt in ("jsonl", "parquet"):
            writer: Callable[[], bytes] = partial(_write, url, run_ids, fmt, flt)
            st.download_button(
                f"Download {fmt.upper() if fmt == 'jsonl' else 'Parquet'}",
                data=writer,
                file_name=file_name(names, fmt),
                mime=_MIME[fmt],
                on_click="ignore",
                disabled=too_many or total == 0,
                icon=":material/download:",
                key=f"ep_export_{fmt}",
            )
